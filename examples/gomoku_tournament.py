"""A round-robin Gomoku tournament of three policies, trained as one multi-agent job.

    opentinker up
    python examples/gomoku_tournament.py --steps 20
    python examples/gomoku_tournament.py --scheduler 127.0.0.1:50051 --init-checkpoint <sft checkpoint id>

Three agents sit at one board game: "ada" and "bo" learn (each its own model copy, Trainer
session and optimiser), "cy" is frozen (a fixed sparring partner: it plays and is rated, never
updated). With ROUND_ROBIN pairing every ordered pair of agents plays both colours every step
(6 pairings x --games matches), each agent through its own Rollout policy, with turns, what each
seat sees and the barriers between rollout, update and weight sync enforced by the
Coordinator's Agent Protocol. Nothing here is specific to two agents: the job spec lists agents,
the Coordinator pairs them.

It prints one line per step (every agent's Elo and invalid-move rate) and, at the end, the
standings (Elo, win/draw/loss) and the head-to-head table, and writes them to --out as JSON.
By default the agents start from a randomly initialised tiny model, which cannot play yet (it
forfeits on illegal moves): the point is the protocol. Start them from a Gomoku warm-up
checkpoint (bench/gomoku_selfplay.py makes one) with --init-checkpoint to watch them play.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

AGENTS = ("ada", "bo", "cy")
FROZEN = ("cy",)


@dataclass(frozen=True, kw_only=True)
class Config:
    scheduler: str = "127.0.0.1:50051"
    steps: int = 20
    games: int = 2
    """Matches per ordered pairing per step."""
    board: int = 3
    win_length: int = 3
    init_checkpoint: str = ""
    seed: int = 1
    out: Path = Path("runs/gomoku_tournament")


@dataclass(kw_only=True)
class Standings:
    job_id: str
    succeeded: bool
    message: str
    elo: dict[str, float] = field(default_factory=dict)
    record: dict[str, dict[str, float]] = field(default_factory=dict)
    """agent -> {games, win_rate, draw_rate, loss_rate, invalid_move_rate} of the last step."""
    head_to_head: dict[str, dict[str, float]] = field(default_factory=dict)
    """agent -> opponent -> win rate of the last step."""
    elo_curve: dict[str, list[float]] = field(default_factory=dict)


def model(config: Config) -> dict:
    if config.init_checkpoint:
        return {"checkpoint": {"checkpoint_id": config.init_checkpoint}}
    return {"builtin": {"name": "tiny-llama", "seed": config.seed}}


def agent_spec(name: str, config: Config) -> dict:
    agent = {"agent_id": name, "model": model(config), "frozen": name in FROZEN,
             "sampling": {"max_new_tokens": 4, "temperature": 1.0}, "limits": {"max_turns": 12}}
    if name not in FROZEN:
        agent |= {"adaptation": {"full": {}},
                  "algorithm": {"optimizer": {"learning_rate": 3e-4, "max_grad_norm": 1.0},
                                "advantage": {"estimator": "GRPO", "normalize_by_std": True}}}
    return agent


def tournament_spec(config: Config) -> dict:
    game = {"size": config.board, "win_length": config.win_length, "opponent": "none", "max_invalid_moves": 2}
    return {"type": "RL", "display_name": "gomoku round robin",
            "environment": {"env_name": "gomoku", "config": game},
            "agents": [agent_spec(name, config) for name in AGENTS],
            "multi_agent": {"pairing": "PAIRING_ROUND_ROBIN"},
            "training": {"total_steps": config.steps, "batch_size": 1, "group_size": config.games,
                         "seed": config.seed}}


def print_step(step: int, values_by_agent: dict[str, dict[str, float]]) -> None:
    cells = [f"{agent} elo {values['elo']:6.1f} invalid {values['match/invalid_move_rate']:.2f}"
             for agent, values in sorted(values_by_agent.items())]
    print(f"step {step:3d} | " + " | ".join(cells), flush=True)


def standings_of(result, job_id: str) -> Standings:
    standings = Standings(job_id=job_id, succeeded=result.succeeded, message=result.job.status_message)
    for agent in AGENTS:
        played = [values for _, values in result.agent_history.get(agent, []) if "match/games" in values]
        if not played:
            continue
        last = played[-1]
        standings.elo[agent] = last["elo"]
        standings.elo_curve[agent] = [values["elo"] for values in played]
        standings.record[agent] = {name: last[f"match/{name}"] for name in
                                   ("games", "win_rate", "draw_rate", "loss_rate", "invalid_move_rate")}
        standings.head_to_head[agent] = {opponent: last[f"match/vs/{opponent}/win_rate"]
                                         for opponent in AGENTS if f"match/vs/{opponent}/win_rate" in last}
    return standings


def print_standings(standings: Standings) -> None:
    print("\nstandings (last step)")
    print(f"{'agent':<6} {'elo':>7} {'games':>5} {'win':>5} {'draw':>5} {'loss':>5}")
    for agent in sorted(standings.elo, key=standings.elo.get, reverse=True):
        r = standings.record[agent]
        frozen = " (frozen)" if agent in FROZEN else ""
        print(f"{agent:<6} {standings.elo[agent]:>7.1f} {r['games']:>5.0f} {r['win_rate']:>5.2f} "
              f"{r['draw_rate']:>5.2f} {r['loss_rate']:>5.2f}{frozen}")
    print("\nhead to head: win rate of the row agent against the column agent")
    print("      " + "".join(f"{agent:>6}" for agent in AGENTS))
    for agent in AGENTS:
        row = standings.head_to_head.get(agent, {})
        print(f"{agent:<6}" + "".join(f"{row[o]:>6.2f}" if o in row else f"{'-':>6}" for o in AGENTS))


def run(config: Config, api_key: str | None = None) -> Standings:
    from opentinker.client import SchedulerClient, ServiceClient

    scheduler = SchedulerClient(config.scheduler, api_key=api_key)
    client = ServiceClient(config.scheduler, api_key=api_key)
    job = scheduler.submit_job(tournament_spec(config))
    print(f"job {job.job_id}: {len(AGENTS)} agents, round robin, {config.steps} steps", flush=True)
    pending: dict[int, dict[str, dict[str, float]]] = {}

    def on_event(event) -> None:
        if event.WhichOneof("payload") != "metrics" or "elo" not in event.metrics.values:
            return
        step = pending.setdefault(event.metrics.step, {})
        step[event.metrics.agent_id] = dict(event.metrics.values)
        if len(step) == len(AGENTS):
            print_step(event.metrics.step, pending.pop(event.metrics.step))

    result = client.follow(job.job_id, on_event=on_event)
    standings = standings_of(result, job.job_id)
    print_standings(standings)
    config.out.mkdir(parents=True, exist_ok=True)
    (config.out / "standings.json").write_text(json.dumps(standings.__dict__, indent=2) + "\n")
    return standings


def parse_args(argv: list[str] | None = None) -> Config:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Config()
    p.add_argument("--scheduler", default=defaults.scheduler)
    p.add_argument("--steps", type=int, default=defaults.steps)
    p.add_argument("--games", type=int, default=defaults.games, help="matches per ordered pairing per step")
    p.add_argument("--board", type=int, default=defaults.board)
    p.add_argument("--win-length", type=int, default=defaults.win_length)
    p.add_argument("--init-checkpoint", default="", help="start every agent from this checkpoint")
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--out", type=Path, default=defaults.out)
    args = p.parse_args(argv)
    return Config(scheduler=args.scheduler, steps=args.steps, games=args.games, board=args.board,
                  win_length=args.win_length, init_checkpoint=args.init_checkpoint, seed=args.seed, out=args.out)


def main(argv: list[str] | None = None) -> int:
    standings = run(parse_args(argv))
    if not standings.succeeded:
        print(f"the job did not succeed: {standings.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
