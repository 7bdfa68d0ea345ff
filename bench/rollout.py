"""Rollout throughput: episodes/s and generated tokens/s through the Rollout service vs in-process loops.

    .venv/bin/python bench/rollout.py             # 3 rounds per target (~2 min on 2 cores)
    .venv/bin/python bench/rollout.py --quick     # 1 round, fewer episodes: a smoke run

What runs, all on this machine, with the same model (builtin tiny-llama, seed 0), the same
game (bench/_rollout_games.py TurnsGame: `--turns` steps per episode, each step delayed by
the scenario's delay) and the same sampling (temperature 1, no top-k/top-p, at most
`--max-new-tokens` per action, stopping on eos or one of STOP_TOKEN_IDS, which makes actions
about 15 tokens long on average):

* `service`: the Rollout service (`python -m opentinker_rollout`, continuous batching) and
  the EnvHost (`python -m opentinker_envhost`, serving TurnsGame by import path) as two
  processes; this process calls LoadModel once, then RunEpisodes for `--episodes` episodes
  per round and reads the trajectory stream to its end.
* `service-static`: a second Rollout process on the same EnvHost with
  OPENTINKER_ROLLOUT_BATCHING=static (each batch decodes to its longest row before the next
  starts), to measure what continuous batching buys in the same run.
* `in-process`: a lockstep loop in this process: every live episode's context goes into one
  left-padded `model.generate` call (sampling, processed scores kept for logprobs), then every
  episode steps its own TurnsGame at once (asyncio.gather), observation tokens are appended
  with the same renderer, and so on until every episode is done. This is the ceiling a
  batched in-process loop reaches: no RPC, no serialisation, no processes.
* `one-at-a-time`: the same loop given one episode at a time (`--sequential-episodes` of them).

Scenarios: `fast` (no step delay; target: service >= 0.90 x in-process generated tokens/s)
and `slow` (`--slow-delay-ms`, 50 by default; target: service >= 2 x one-at-a-time episodes/s).
Continuous over static batching is reported for both, with no target.

Environment overhead per episode (target: median <= 1 ms): what opening, resetting and closing
its environment costs an episode besides its steps, measured after the rounds on the same
EnvHost process, one episode at a time through the Rollout's own EnvHost client and timing
wrapper (`envhost_environments`, `TimedEnvironment`), 100 times each: `reused` takes
the job's parked session, resets it over its Interact stream and parks it again (the Rollout's
path: in a job's steady state an episode pays one Reset); `fresh` opens, resets and closes a
session with unary calls (every episode's path before sessions were reused); `in-process`
constructs and resets the TurnsGame (measured in the in-process rounds). Also shown: the median
of the `service` trajectories' `env_overhead_seconds` metric (the same measure inside
RunEpisodes; the warm-up calls open the job's sessions of each scenario, as a job's first step
does), which also counts the time the episode waited for the Rollout's event loop while
generation kept its process busy.
Each round runs every target of a scenario in rotating order; medians over rounds are reported
with the mean action length and turns per episode of each target (the work must match: the
sampling is random, so these agree only on average). All processes share this machine's
cores, and torch in each uses its default threads.

Results: a table on stdout, progress on stderr, JSON in bench/results/rollout.json (--out).
Exit status 1 when the run fails (a server died, an episode errored); a MISS against a target
is printed but does not fail the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc
import torch

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _rollout_games import TurnsGame  # noqa: E402
from envhost import ROOT, BenchFailure, ServerProcess, clean_environment, free_port  # noqa: E402

from opentinker_api.common.v1 import model_pb2, resources_pb2, sampling_pb2  # noqa: E402
from opentinker_api.common.v1.environment_pb2 import EnvironmentReference  # noqa: E402
from opentinker_api.rollout.v1 import rollout_service_pb2 as pb  # noqa: E402
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as pb_grpc  # noqa: E402
from opentinker_runtime.core.heap import settle_heap  # noqa: E402
from opentinker_env.game import opening_messages  # noqa: E402
from opentinker_runtime.ml.models import load_model  # noqa: E402
from opentinker_runtime.ml.sources import ModelSource  # noqa: E402
from opentinker_rollout.envhost_client import EnvHostChannels, EnvironmentTarget, envhost_environments  # noqa: E402
from opentinker_rollout.environment import TimedEnvironment  # noqa: E402
from opentinker_rollout.episode import Episode  # noqa: E402
from opentinker_rollout.rendering import TokenizerRenderer  # noqa: E402

MODEL_NAME = "tiny-llama"
EOS, PAD = 259, 256
STOP_TOKEN_IDS = tuple(range(97, 113))
"""Sixteen lower-case letters end an action besides eos (a random model's actions would
otherwise almost always run to the token limit and end the episode)."""
LEASE = resources_pb2.LeaseContext(job_id="bench-rollout", lease_id="bench", fencing_token=1)
SERVICE_BATCHING = {"service": "continuous", "service-static": "static"}
"""Rollout processes by target name, and their OPENTINKER_ROLLOUT_BATCHING."""
TARGETS = {"fast": ("service", "service-static", "in-process"),
           "slow": ("service", "service-static", "one-at-a-time", "in-process")}
CLIENT_EPISODES = 100
"""Episodes of each one-at-a-time measure of the environment overhead through the Rollout's client."""
ENV_OVERHEAD_TARGET_MS = 1.0
SERVING_TIMEOUT_S = 180.0
"""Three processes importing torch at once take over a minute on a busy 2-core machine."""


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    rounds: int
    episodes: int
    sequential_episodes: int
    turns: int
    max_new_tokens: int
    slow_delay_ms: float
    out: Path


@dataclass(frozen=True, kw_only=True)
class Measurement:
    target: str
    scenario: str
    seconds: float
    episodes: int
    generated_tokens: int
    turns: int

    @property
    def episodes_per_s(self) -> float:
        return self.episodes / self.seconds

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.seconds


def parse_args(argv: list[str] | None) -> BenchConfig:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=64, help="episodes per service/in-process round")
    parser.add_argument("--sequential-episodes", type=int, default=12,
                        help="episodes per one-at-a-time round")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--slow-delay-ms", type=float, default=50.0)
    parser.add_argument("--quick", action="store_true", help="1 round, 16 episodes, 4 sequential")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "rollout.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.episodes, args.sequential_episodes = 1, 16, 4
    return BenchConfig(rounds=args.rounds, episodes=args.episodes,
                       sequential_episodes=args.sequential_episodes, turns=args.turns,
                       max_new_tokens=args.max_new_tokens, slow_delay_ms=args.slow_delay_ms,
                       out=args.out)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---- the in-process loops -------------------------------------------------------------------

@dataclass(kw_only=True)
class LoopEpisode:
    game: TurnsGame
    token_ids: list[int]
    generated: int = 0
    turns: int = 0
    done: bool = False


class InProcessLoop:
    """Plays episodes in lockstep with `model.generate` and in-process games."""

    def __init__(self, config: BenchConfig) -> None:
        loaded = load_model(ModelSource.builtin(MODEL_NAME, 0))
        self.model, self.tokenizer = loaded.model.eval(), loaded.tokenizer
        self.renderer = TokenizerRenderer(self.tokenizer)
        self.config = config
        self.stops = {EOS, *STOP_TOKEN_IDS}
        self.env_overheads: list[float] = []
        """Seconds each measured episode spent constructing and resetting its game."""

    async def play(self, count: int, delay_ms: float) -> tuple[int, int, int]:
        """Play `count` episodes together; (episodes, generated tokens, turns)."""
        episodes = [await self._start(i, delay_ms) for i in range(count)]
        while live := [e for e in episodes if not e.done]:
            actions = self._generate([e.token_ids for e in live])
            await asyncio.gather(*(self._interact(e, a) for e, a in zip(live, actions, strict=True)))
        return len(episodes), sum(e.generated for e in episodes), sum(e.turns for e in episodes)

    async def _start(self, index: int, delay_ms: float) -> LoopEpisode:
        started = time.perf_counter()
        game = TurnsGame(turns=self.config.turns, delay_ms=delay_ms)
        observation = await game.reset(index=index)
        self.env_overheads.append(time.perf_counter() - started)
        messages = opening_messages(game.get_system_prompt(), game.get_initial_user_message(), observation)
        return LoopEpisode(game=game, token_ids=self.renderer.prompt(messages))

    def _generate(self, contexts: list[list[int]]) -> list[tuple[list[int], list[float]]]:
        width = max(map(len, contexts))
        ids = torch.full((len(contexts), width), PAD, dtype=torch.long)
        attention = torch.zeros_like(ids)
        for row, context in enumerate(contexts):
            ids[row, width - len(context):] = torch.tensor(context)
            attention[row, width - len(context):] = 1
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=ids, attention_mask=attention, do_sample=True, temperature=1.0, top_k=0,
                top_p=1.0, max_new_tokens=self.config.max_new_tokens, pad_token_id=PAD,
                eos_token_id=sorted(self.stops), output_scores=True, return_dict_in_generate=True)
        new = out.sequences[:, width:]
        logprobs = torch.stack([torch.log_softmax(s.float(), -1) for s in out.scores], dim=1)
        chosen = logprobs.gather(-1, new[:, :, None]).squeeze(-1)
        return [self._cut(new[row].tolist(), chosen[row].tolist()) for row in range(len(contexts))]

    def _cut(self, tokens: list[int], logprobs: list[float]) -> tuple[list[int], list[float]]:
        """The action up to and including its first stop token (generate pads finished rows)."""
        for index, token in enumerate(tokens):
            if token in self.stops:
                return tokens[:index + 1], logprobs[:index + 1]
        return tokens, logprobs

    async def _interact(self, episode: LoopEpisode, action: tuple[list[int], list[float]]) -> None:
        tokens, _ = action
        episode.token_ids += tokens
        episode.generated += len(tokens)
        episode.turns += 1
        if not tokens or tokens[-1] not in self.stops:   # cut by the token limit: episode over
            episode.done = True
            return
        result = await episode.game.step(self.renderer.action_text(tokens))
        if result.done:
            episode.done = True
            return
        episode.token_ids += self.renderer.observation(result.observation, tokens)


# ---- the service ----------------------------------------------------------------------------

class ServiceTarget:
    """The EnvHost process, two Rollout processes on it (continuous and static batching), and
    the policy each has loaded."""

    def __init__(self, log_dir: Path, config: BenchConfig) -> None:
        self.config = config
        envhost_port, nowhere = free_port(), free_port()
        self.envhost = ServerProcess(
            name="envhost", command=[sys.executable, "-m", "opentinker_envhost"], port=envhost_port,
            log_path=log_dir / "envhost.log", env=clean_environment(
                OPENTINKER_AUTH="disabled", OPENTINKER_ENVHOST_PORT=str(envhost_port),
                OPENTINKER_ENVHOST_HOST="127.0.0.1", OPENTINKER_ENVHOST_GAMES="turns=_rollout_games:TurnsGame",
                OPENTINKER_ENVHOST_SCHEDULER_ADDRESS=f"127.0.0.1:{nowhere}"))
        self.rollouts = {name: self._rollout(name, batching, log_dir, envhost_port, nowhere)
                         for name, batching in SERVICE_BATCHING.items()}
        self.policy_ids: dict[str, str] = {}
        self.env_overheads: dict[str, list[float]] = {name: [] for name in SERVICE_BATCHING}
        """Per Rollout: each measured episode's `env_overhead_seconds` (its trajectory's metric)."""

    @staticmethod
    def _rollout(name: str, batching: str, log_dir: Path, envhost_port: int, nowhere: int) -> ServerProcess:
        port = free_port()
        return ServerProcess(
            name=name, command=[sys.executable, "-m", "opentinker_rollout"], port=port,
            log_path=log_dir / f"{name}.log", env=clean_environment(
                OPENTINKER_AUTH="disabled", OPENTINKER_ROLLOUT_PORT=str(port),
                OPENTINKER_ROLLOUT_BATCHING=batching,
                OPENTINKER_ROLLOUT_ENVHOST_ADDRESS=f"127.0.0.1:{envhost_port}",
                OPENTINKER_ROLLOUT_SCHEDULER_ADDRESS=f"127.0.0.1:{nowhere}",
                OPENTINKER_CHECKPOINT_DIR=str(log_dir / "checkpoints")))

    @property
    def servers(self) -> list[ServerProcess]:
        return [self.envhost, *self.rollouts.values()]

    def start(self) -> None:
        for server in self.servers:
            server.start()
        for server in self.servers:
            server.wait_serving(SERVING_TIMEOUT_S)

    def stop(self) -> None:
        for server in reversed(self.servers):
            server.stop()

    def log_tails(self) -> str:
        return "\n".join(f"{server.name} log:\n{server.log_tail()}" for server in self.servers)

    async def load(self, name: str, stub: pb_grpc.RolloutServiceStub) -> None:
        request = pb.LoadModelRequest(request_id="bench-load", lease=LEASE, model=model_pb2.ModelReference(
            builtin=model_pb2.BuiltinModel(name=MODEL_NAME, seed=0)))
        self.policy_ids[name] = (await stub.LoadModel(request, timeout=120)).policy.policy_id

    def environment_config(self, delay_ms: float) -> dict[str, float]:
        return {"turns": self.config.turns, "delay_ms": delay_ms}

    async def play(self, name: str, stub: pb_grpc.RolloutServiceStub, count: int,
                   delay_ms: float) -> tuple[int, int, int]:
        environment = EnvironmentReference(env_name="turns")
        environment.config.update(self.environment_config(delay_ms))
        specs = [pb.EpisodeSpec(group_id=f"g{i}") for i in range(count)]
        for index, spec in enumerate(specs):
            spec.reset_kwargs.update({"index": index})
        request = pb.RunEpisodesRequest(
            policy_id=self.policy_ids[name], lease=LEASE, environment=environment, episodes=specs, group_size=1,
            sampling=sampling_pb2.SamplingParams(max_new_tokens=self.config.max_new_tokens,
                                                 temperature=1.0, stop_token_ids=STOP_TOKEN_IDS))
        episodes = generated = turns = 0
        async for item in stub.RunEpisodes(request, timeout=600):
            if item.WhichOneof("item") == "error":
                raise BenchFailure(f"episode failed: {item.error.message}")
            if item.WhichOneof("item") == "trajectory":
                trajectory = item.trajectory
                if trajectory.env_error:
                    raise BenchFailure(f"environment error: {trajectory.env_error}")
                episodes += 1
                generated += sum(trajectory.loss_mask)
                turns += len(trajectory.turns)
                self.env_overheads[name].append(trajectory.metrics["env_overhead_seconds"])
        return episodes, generated, turns

    async def client_overheads(self, count: int) -> dict[str, list[float]]:
        """Seconds of open + reset + close per episode, `count` episodes one at a time through the
        Rollout's EnvHost client (no generation, no steps): `reused`, a job's session taken from
        the pool, reset, given back (the Rollout's path); `fresh`, OpenSession + Reset +
        CloseSession as unary calls (every episode's path before sessions were reused). One
        path after the other, `reused` first: a fresh session's close leaves the EnvHost work
        (its game process goes back to the pool or ends) that an episode right after it would
        wait for, which is not that episode's cost. This process's heap is settled first, as
        the Rollout's is once it has started (`opentinker_runtime.core.heap`)."""
        channels = EnvHostChannels()
        target = EnvironmentTarget(address=self.envhost.address, env_name="turns",
                                   config=self.environment_config(0.0), job_id=LEASE.job_id)
        paths = {"reused": envhost_environments(channels, target),
                 "fresh": envhost_environments(channels, target, reuse_sessions=False, interact=False)}
        seconds: dict[str, list[float]] = {name: [] for name in paths}
        settle_heap()
        try:
            for name in ("reused", "fresh"):
                for index in range(count + 2):  # the first two open the channel and the pooled session
                    episode = Episode(group_id="overhead", episode_index=index, reset_kwargs={"index": index})
                    session = TimedEnvironment(paths[name](episode))
                    await session.open()
                    await session.reset(episode.reset_kwargs, 0)
                    await session.close()
                    seconds[name].append(session.overhead_s)
        finally:
            await channels.close()
        return {name: values[2:] for name, values in seconds.items()}


# ---- rounds and report ----------------------------------------------------------------------

async def measure(target: str, scenario: str, delay_ms: float, config: BenchConfig,
                  loop: InProcessLoop, service: ServiceTarget,
                  stubs: dict[str, pb_grpc.RolloutServiceStub]) -> Measurement:
    started = time.perf_counter()
    if target in stubs:
        counts = await service.play(target, stubs[target], config.episodes, delay_ms)
    elif target == "in-process":
        counts = await loop.play(config.episodes, delay_ms)
    else:
        totals = [await loop.play(1, delay_ms) for _ in range(config.sequential_episodes)]
        counts = tuple(sum(column) for column in zip(*totals, strict=True))
    seconds = time.perf_counter() - started
    episodes, generated, turns = counts
    return Measurement(target=target, scenario=scenario, seconds=seconds, episodes=episodes,
                       generated_tokens=generated, turns=turns)


async def run_rounds(config: BenchConfig, loop: InProcessLoop, service: ServiceTarget) -> list[Measurement]:
    delays = {"fast": 0.0, "slow": config.slow_delay_ms}
    results: list[Measurement] = []
    channels = {name: grpc.aio.insecure_channel(server.address) for name, server in service.rollouts.items()}
    stubs = {name: pb_grpc.RolloutServiceStub(channel) for name, channel in channels.items()}
    try:
        for name, stub in stubs.items():
            await service.load(name, stub)
            for delay in delays.values():  # warm-up: first calls, the job's EnvHost sessions
                await service.play(name, stub, config.episodes, delay)
            service.env_overheads[name].clear()
        await loop.play(4, 0.0)
        loop.env_overheads.clear()
        for round_index in range(config.rounds):
            for scenario, targets in TARGETS.items():
                shift = round_index % len(targets)
                for target in targets[shift:] + targets[:shift]:
                    result = await measure(target, scenario, delays[scenario], config, loop, service, stubs)
                    progress(f"round {round_index + 1} {scenario:4s} {target:14s} "
                             f"{result.episodes_per_s:6.2f} episodes/s {result.tokens_per_s:8.1f} tokens/s")
                    results.append(result)
    finally:
        for channel in channels.values():
            await channel.close()
    return results


def summarize(results: list[Measurement]) -> dict[str, dict[str, dict[str, float]]]:
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for scenario, targets in TARGETS.items():
        summary[scenario] = {}
        for target in targets:
            runs = [r for r in results if r.scenario == scenario and r.target == target]
            summary[scenario][target] = {
                "episodes_per_s": statistics.median(r.episodes_per_s for r in runs),
                "tokens_per_s": statistics.median(r.tokens_per_s for r in runs),
                "tokens_per_action": sum(r.generated_tokens for r in runs) / max(1, sum(r.turns for r in runs)),
                "turns_per_episode": sum(r.turns for r in runs) / max(1, sum(r.episodes for r in runs))}
    return summary


def env_overhead_ms(loop: InProcessLoop, service: ServiceTarget,
                    client: dict[str, list[float]]) -> dict[str, float]:
    """Median environment overhead per episode, in ms (see the module docstring)."""
    return {"client_reused_session": statistics.median(client["reused"]) * 1000,
            "client_fresh_session": statistics.median(client["fresh"]) * 1000,
            "in_process": statistics.median(loop.env_overheads) * 1000,
            "service_under_load": statistics.median(service.env_overheads["service"]) * 1000,
            "service_static_under_load": statistics.median(service.env_overheads["service-static"]) * 1000}


def ratios(summary: dict[str, dict[str, dict[str, float]]]) -> dict[str, float]:
    fast, slow = summary["fast"], summary["slow"]
    return {
        "fast_tokens_service_over_in_process": fast["service"]["tokens_per_s"] / fast["in-process"]["tokens_per_s"],
        "fast_episodes_service_over_in_process":
            fast["service"]["episodes_per_s"] / fast["in-process"]["episodes_per_s"],
        "slow_episodes_service_over_one_at_a_time":
            slow["service"]["episodes_per_s"] / slow["one-at-a-time"]["episodes_per_s"],
        "slow_episodes_service_over_in_process":
            slow["service"]["episodes_per_s"] / slow["in-process"]["episodes_per_s"],
        "fast_tokens_continuous_over_static":
            fast["service"]["tokens_per_s"] / fast["service-static"]["tokens_per_s"],
        "slow_episodes_continuous_over_static":
            slow["service"]["episodes_per_s"] / slow["service-static"]["episodes_per_s"]}


TARGET_RATIOS = {"fast_tokens_service_over_in_process": 0.90, "slow_episodes_service_over_one_at_a_time": 2.0}


def print_report(summary: dict[str, Any], ratio: dict[str, float], overhead: dict[str, float],
                 config: BenchConfig) -> None:
    print(f"\nRollout throughput, {config.rounds} round(s), {config.episodes} episodes of "
          f"{config.turns} turns, <= {config.max_new_tokens} tokens per action")
    print(f"{'scenario':9s}{'target':16s}{'episodes/s':>12s}{'tokens/s':>11s}{'tok/action':>12s}{'turns/ep':>10s}")
    for scenario, targets in summary.items():
        for target, row in targets.items():
            print(f"{scenario:9s}{target:16s}{row['episodes_per_s']:12.2f}{row['tokens_per_s']:11.1f}"
                  f"{row['tokens_per_action']:12.1f}{row['turns_per_episode']:10.2f}")
    for name, value in ratio.items():
        target = TARGET_RATIOS.get(name)
        verdict = "" if target is None else f"  target >= {target:.2f}: {'ok' if value >= target else 'MISS'}"
        print(f"{name:45s}{value:6.2f}{verdict}")
    verdict = "ok" if overhead["client_reused_session"] <= ENV_OVERHEAD_TARGET_MS else "MISS"
    print(f"env overhead per episode (open/reset/close), median: Rollout client "
          f"{overhead['client_reused_session']:.3f} ms (fresh session per episode, as before: "
          f"{overhead['client_fresh_session']:.3f} ms), in-process {overhead['in_process']:.3f} ms"
          f"  target <= {ENV_OVERHEAD_TARGET_MS:g} ms: {verdict}")
    print(f"  the same inside RunEpisodes, while generation shares the Rollout's process: "
          f"{overhead['service_under_load']:.3f} ms (static batching {overhead['service_static_under_load']:.3f} ms)")


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-rollout-") as tmp:
        service = ServiceTarget(Path(tmp), config)
        try:
            progress("starting EnvHost and Rollout processes ...")
            service.start()
            loop = InProcessLoop(config)
            results = asyncio.run(run_rounds(config, loop, service))
            client = asyncio.run(service.client_overheads(CLIENT_EPISODES))
        except (BenchFailure, grpc.RpcError) as failure:
            print(f"bench failed: {failure}\n{service.log_tails()}", file=sys.stderr)
            return 1
        finally:
            service.stop()
    summary = summarize(results)
    ratio = ratios(summary)
    overhead = env_overhead_ms(loop, service, client)
    print_report(summary, ratio, overhead, config)
    config.out.parent.mkdir(parents=True, exist_ok=True)
    config.out.write_text(json.dumps({"config": {k: str(v) for k, v in asdict(config).items()},
                                      "summary": summary, "ratios": ratio,
                                      "env_overhead_ms": overhead,
                                      "runs": [asdict(r) for r in results]}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
