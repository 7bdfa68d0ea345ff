"""Capture one GRPO step of a real tiny job as data (the samples in docs/architecture.md).

    python scripts/capture_rl_step.py                 # writes runs/capture_rl_step/rl_step.{md,json}

1. Starts a private local stack (`opentinker up` in a temporary state dir, on free ports).
2. Submits a 2-step RL job on the built-in `guess_number` game and records the Job as
   submitted, the Job once RUNNING (assignments and leases), the lease records in Redis at
   that moment, and every JobEvent (WatchJob).
3. Replays the job's first step with the Coordinator's own gRPC adapters
   (`opentinker_coordinator.adapters.remote`) and step function (`rl_driver.rl_step`) against the same
   Trainer and Rollout, recording every request and response at the stubs. The replay is a job
   id of its own without a lease (`<job>-replay`), so it never touches the real job's sessions;
   same spec, seeds and base weights, so its step 1 can be compared with the job's.
4. Writes everything to OUT/rl_step.json, and OUT/rl_step.md with long lists trimmed, then
   stops the stack.
"""

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from google.protobuf import json_format
from google.protobuf.message import Message

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.rollout.v1 import rollout_service_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.trainer.v1 import trainer_service_pb2
from opentinker.client import SchedulerClient
from opentinker_runtime.auth.channels import authenticated_channel
from opentinker_runtime.core.redis_store import Keys
from opentinker_runtime.ml.tokenizer import build_byte_tokenizer
from opentinker_coordinator.driver import job_plans
from opentinker_coordinator.adapters.remote import RemoteRollout, RemoteTrainer, RemoteWeightSync
from opentinker_coordinator.driver.rl_driver import RlPorts, rl_step

CLI = [sys.executable, "-m", "opentinker.cli.main"]
SPEC = {
    "type": "RL", "display_name": "one RL step as data",
    "policy": {"model": {"builtin": {"name": "tiny-llama", "seed": 1}}, "adaptation": {"full": {}},
               "algorithm": {"optimizer": {"learning_rate": 0.005}},
               "sampling": {"max_new_tokens": 8, "temperature": 1.0, "stop": list("0123456789")},
               "limits": {"max_turns": 3}},
    "environment": {"env_name": "guess_number", "config": {"low": 1, "high": 4, "max_turns": 3}},
    "training": {"total_steps": 2, "batch_size": 2, "group_size": 4, "eval_episodes": 2, "seed": 1},
}
KEEP = 6
"""Trimmed lists show their first and last KEEP items."""


# ---- the stack ---------------------------------------------------------------------------------

def free_port_block(count: int) -> int:
    for base in range(21_000, 32_000, 17):
        sockets = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError("no free block of ports")


def start_stack(state_dir: Path) -> dict:
    base = free_port_block(6)
    result = subprocess.run([*CLI, "up", "--state-dir", str(state_dir), "--base-port", str(base), "--no-dashboard",
                             "--redis-port", str(base + 5), "--timeout", "120", "--json"],
                            capture_output=True, text=True, timeout=180)
    if result.returncode != 0:
        raise SystemExit(f"opentinker up failed:\n{result.stderr}")
    status = json.loads(result.stdout)
    status["addresses"] = {p["name"]: p["address"] for p in status["processes"]}
    status["api_key"] = (state_dir / "admin.key").read_text().strip()
    return status


def stop_stack(state_dir: Path) -> None:
    subprocess.run([*CLI, "down", "--state-dir", str(state_dir)], capture_output=True, timeout=60)


# ---- the real job ------------------------------------------------------------------------------

@dataclass(kw_only=True)
class JobCapture:
    submitted: job_pb2.Job
    running: job_pb2.Job | None = None
    redis_leases: dict[str, dict[str, str]] = field(default_factory=dict)
    redis_job_keys: dict[str, str] = field(default_factory=dict)
    """Every Redis key of the job once it finished, with its type."""
    events: list[job_pb2.JobEvent] = field(default_factory=list)


def redis_lease_records(redis_url: str, job_id: str) -> dict[str, dict[str, str]]:
    """Every Redis hash behind the job's leases right now: lease records and worker slots."""
    keys, client = Keys(), redis.Redis.from_url(redis_url, decode_responses=True)
    found = {}
    for lease_id in sorted(client.smembers(keys.job_leases(job_id))):
        record = client.hgetall(keys.lease(lease_id))
        found[keys.lease(lease_id)] = record
        if record.get("worker_id"):
            found[keys.worker_slots(record["worker_id"])] = client.hgetall(keys.worker_slots(record["worker_id"]))
    client.close()
    return found


def redis_job_keys(redis_url: str, job_id: str) -> dict[str, str]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    found = {key: client.type(key) for key in sorted(client.scan_iter(f"*{job_id}*"))}
    client.close()
    return found


def run_job(stack: dict) -> JobCapture:
    with SchedulerClient(stack["addresses"]["scheduler"], api_key=stack["api_key"]) as scheduler:
        capture = JobCapture(submitted=scheduler.submit_job(SPEC))
        for event in scheduler.watch_job(capture.submitted.job_id):
            capture.events.append(event)
            if (event.WhichOneof("payload") == "state_changed"
                    and event.state_changed.to_state == job_pb2.Job.STATE_RUNNING):
                capture.redis_leases = redis_lease_records(stack["redis_url"], capture.submitted.job_id)
                capture.running = scheduler.get_job(capture.submitted.job_id)
    capture.redis_job_keys = redis_job_keys(stack["redis_url"], capture.submitted.job_id)
    return capture


# ---- the replay, recorded at the stubs ---------------------------------------------------------

METHODS = {**rollout_service_pb2.DESCRIPTOR.services_by_name["RolloutService"].methods_by_name,
           **trainer_service_pb2.DESCRIPTOR.services_by_name["TrainerService"].methods_by_name}


@dataclass(kw_only=True)
class Call:
    method: str
    requests: list[Message] = field(default_factory=list)
    responses: list[Message] = field(default_factory=list)


class RecordingStub:
    """A grpc.aio stub whose calls append a `Call` (every request and response) to `calls`."""

    def __init__(self, stub: Any, calls: list[Call]) -> None:
        self._stub, self._calls = stub, calls

    def __getattr__(self, name: str) -> Any:
        method, kind = getattr(self._stub, name), METHODS[name]
        call = Call(method=name)
        if kind.client_streaming:
            return self._stream_unary(method, call)
        if kind.server_streaming:
            return self._unary_stream(method, call)
        return self._unary_unary(method, call)

    def _unary_unary(self, method: Any, call: Call) -> Any:
        async def invoke(request: Message, **kwargs: Any) -> Message:
            self._calls.append(call)
            call.requests.append(request)
            call.responses.append(await method(request, **kwargs))
            return call.responses[-1]
        return invoke

    def _unary_stream(self, method: Any, call: Call) -> Any:
        def invoke(request: Message, **kwargs: Any) -> Any:
            self._calls.append(call)
            call.requests.append(request)

            async def responses() -> Any:
                async for response in method(request, **kwargs):
                    call.responses.append(response)
                    yield response
            return responses()
        return invoke

    def _stream_unary(self, method: Any, call: Call) -> Any:
        async def invoke(requests: Any, **kwargs: Any) -> Message:
            self._calls.append(call)

            async def recorded() -> Any:
                async for request in requests:
                    call.requests.append(request)
                    yield request
            call.responses.append(await method(recorded(), **kwargs))
            return call.responses[-1]
        return invoke


class KeptReports:
    """The ReporterPort `rl_step` reports progress to; the real job's reports are its JobEvents."""

    def __init__(self) -> None:
        self.progress_phases: list[str] = []

    async def progress(self, *, phase: str, step: int, total_steps: int, metrics: dict | None = None) -> None:
        self.progress_phases.append(phase)

    async def checkpoint(self, ref: Any) -> None:  # not due in step 1
        raise AssertionError("step 1 of the capture spec saves no checkpoint")


async def replay_first_step(job: job_pb2.Job, stack: dict) -> tuple[list[Call], dict]:
    replay = job_pb2.Job(job_id=f"{job.job_id}-replay", spec=job.spec)
    lease, calls, reports = resources_pb2.LeaseContext(), [], KeptReports()
    async with (authenticated_channel(stack["addresses"]["trainer"], stack["api_key"]) as trainer_channel,
                authenticated_channel(stack["addresses"]["rollout"], stack["api_key"]) as rollout_channel):
        trainer, rollout = RemoteTrainer(trainer_channel, replay, lease), RemoteRollout(rollout_channel, replay, lease)
        trainer.stub, rollout.stub = RecordingStub(trainer.stub, calls), RecordingStub(rollout.stub, calls)
        ports = RlPorts(trainer=trainer, rollout=rollout, weights=RemoteWeightSync(trainer, rollout),
                        reporter=reports, stop=asyncio.Event())
        await asyncio.gather(trainer.open(), rollout.open())
        try:
            metrics = await rl_step(job_plans.rl_plan(replay), ports, 0)
        finally:
            await asyncio.gather(trainer.close(), rollout.close())
    assert reports.progress_phases == ["ROLLOUT", "UPDATE", "WEIGHT_SYNC"], reports.progress_phases
    return calls, metrics


# ---- writing it down ---------------------------------------------------------------------------

def as_dict(message: Message) -> dict:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def trimmed(value: Any) -> Any:
    """Long lists as their ends and a count, long strings cut, floats rounded."""
    if isinstance(value, dict):
        return {key: trimmed(item) for key, item in value.items()}
    if isinstance(value, list):
        if len(value) > 2 * KEEP + 1:
            return [*map(trimmed, value[:KEEP]), f"... {len(value) - 2 * KEEP} more ...",
                    *map(trimmed, value[-KEEP:])]
        return [trimmed(item) for item in value]
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, str) and len(value) > 100:
        return f"{value[:60]}... ({len(value)} characters)"
    return value


def compact(value: Any, indent: int = 0) -> str:
    """JSON with short lists and objects on one line."""
    flat = json.dumps(value, ensure_ascii=False)
    if len(flat) + indent <= 100 or not isinstance(value, (dict, list)) or not value:
        return flat
    pad, inner = " " * indent, " " * (indent + 2)
    if isinstance(value, list):
        items = [inner + compact(item, indent + 2) for item in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    items = [f"{inner}{json.dumps(key)}: {compact(item, indent + 2)}" for key, item in value.items()]
    return "{\n" + ",\n".join(items) + f"\n{pad}}}"


def json_block(value: Any) -> list[str]:
    return ["```json", compact(trimmed(value)), "```", ""]


def calls_named(doc: dict, method: str) -> dict:
    return next(call for call in doc["replay_calls"] if call["method"] == method)


def trajectories(doc: dict) -> list[dict]:
    return [r["trajectory"] for r in calls_named(doc, "RunEpisodes")["responses"] if "trajectory" in r]


def showcase(doc: dict) -> dict:
    """The trajectory with the most turns (the first of them)."""
    return max(trajectories(doc), key=lambda t: len(t.get("turns", [])))


def span_table(trajectory: dict) -> list[str]:
    """The token sequence as runs of equal loss mask: ids, text, sampling logprobs, rewards."""
    tokenizer, ids = build_byte_tokenizer(), [int(t) for t in trajectory["token_ids"]]
    mask, logprobs, rewards = trajectory["loss_mask"], trajectory["sampling_logprobs"], trajectory["token_rewards"]
    rows = ["| tokens | mask | text | token ids | sampling logprobs | token rewards |", "|---|---|---|---|---|---|"]
    start = 0
    for end in range(1, len(ids) + 1):
        if end < len(ids) and mask[end] == mask[start]:
            continue
        text = json.dumps(tokenizer.decode(ids[start:end], skip_special_tokens=False), ensure_ascii=False)
        shown = (lambda values: trimmed(values[start:end])) if mask[start] else (lambda values: "0 ...")
        rows.append(f"| [{start}, {end}) | {mask[start]} | `{text[1:-1]}` | {_cell(trimmed(ids[start:end]))} | "
                    f"{_cell(shown(logprobs))} | {_cell(shown(rewards))} |")
        start = end
    return [*rows, ""]


def _cell(value: Any) -> str:
    return json.dumps(value).replace("|", "\\|")


def episode_table(doc: dict) -> list[str]:
    """Every trajectory of the step with the advantage its datum carried."""
    datums = calls_named(doc, "ForwardBackward")["requests"][0]["datums"]
    rows = ["| group | reward | stop reason | actions -> observations | advantage |", "|---|---|---|---|---|"]
    for trajectory, datum in zip(trajectories(doc), datums, strict=True):
        advantage = next((a for a, m in zip(datum.get("advantages", []), datum["loss_mask"], strict=True) if m), 0.0)
        turns = "; ".join(f"{json.dumps(t.get('action_text', ''), ensure_ascii=False)} -> {t.get('observation_text') or '(truncated)'}"
                          for t in trajectory.get("turns", [])).replace("|", "\\|")
        reason = trajectory["stop_reason"].removeprefix("STOP_REASON_")
        rows.append(f"| {trajectory['group_id']} | {trajectory.get('total_reward', 0.0):.2f} | {reason} | {turns} | "
                    f"{advantage:+.3f} |")
    return [*rows, ""]


def events_table(doc: dict) -> list[str]:
    rows = ["| seq | payload | summary |", "|---|---|---|"]
    for event in doc["events"]:
        kind = next(k for k in event if k not in ("job_id", "sequence", "time"))
        body = event[kind]
        if kind == "state_changed":
            text = f"{body.get('from_state', '-')} -> {body['to_state']}: {body.get('reason', '')}"
        elif kind == "progress":
            text = f"{body['progress'].get('phase')} step {body['progress'].get('step', '0')}"
        elif kind == "metrics":
            text = f"step {body.get('step', '0')}: {len(body['values'])} values"
        else:
            text = json.dumps(body)
        rows.append(f"| {event['sequence']} | {kind} | {text.replace('|', '/')} |")
    return [*rows, ""]


def weights_view(doc: dict) -> dict:
    export = calls_named(doc, "ExportWeights")
    update = calls_named(doc, "UpdateWeights")
    chunks = [r["chunk"] for r in export["responses"] if "chunk" in r]
    return {"ExportWeightsRequest": export["requests"][0],
            "ExportWeightsResponse[0]": export["responses"][0],
            "ExportWeightsResponse[1]": export["responses"][1],
            "chunks": f"{len(chunks)} WeightsChunk messages",
            "UpdateWeightsRequest stream": [next(iter(r)) for r in update["requests"]],
            "UpdateWeightsResponse": update["responses"][0]}


def markdown(doc: dict) -> str:
    """The captured step, section by section, in the order the messages travel."""
    running = doc["job_running"] or {}
    fb, optim = calls_named(doc, "ForwardBackward"), calls_named(doc, "OptimStep")
    sample = showcase(doc)
    fb_request = dict(fb["requests"][0], datums=[f"{len(fb['requests'][0]['datums'])} datums, e.g. the one below"])
    datum = fb["requests"][0]["datums"][trajectories(doc).index(sample)]
    parts = ["# One RL step, captured by scripts/capture_rl_step.py", "",
             "## replay vs job, step 1", "", *json_block(doc["summary"]["replay_vs_job_step_1"]),
             "## SubmitJob -> Job", "", *json_block(doc["job_submitted"]),
             "## Job RUNNING: assignments", "", *json_block(running.get("assignments")),
             "## Redis while RUNNING", "", *json_block(doc["redis_leases"]),
             "## CreateSession / LoadModel", "", *json_block([calls_named(doc, m) for m in ("CreateSession", "LoadModel")]),
             "## RunEpisodesRequest", "", *json_block(calls_named(doc, "RunEpisodes")["requests"][0]),
             "## Trajectory (most turns)", "", *json_block(sample), *span_table(sample),
             "## Episodes and advantages", "", *episode_table(doc),
             "## ForwardBackwardRequest", "", *json_block(fb_request), *json_block(datum),
             "## ForwardBackwardResponse", "", *json_block(fb["responses"][0]),
             "## OptimStep", "", *json_block(optim),
             "## ExportWeights -> UpdateWeights", "", *json_block(weights_view(doc)),
             "## JobEvents", "", *events_table(doc),
             "## JobEvent: metrics of step 1", "",
             *json_block(next(e for e in doc["events"] if e.get("metrics", {}).get("step") == "1")),
             "## Redis keys of the job", "", *json_block(doc.get("redis_job_keys"))]
    return "\n".join(parts)


def document(capture: JobCapture, calls: list[Call], metrics: dict) -> dict:
    events = [as_dict(e) for e in capture.events]
    job_step_1 = next(e["metrics"]["values"] for e in events
                      if e.get("metrics", {}).get("step") == "1" and "reward/mean" in e["metrics"]["values"])
    compared = {name: {"replay": metrics.get(name), "job": job_step_1.get(name)}
                for name in ("reward/mean", "loss", "grad_norm", "policy_version")}
    return {
        "summary": {"replay_vs_job_step_1": compared},
        "job_submitted": as_dict(capture.submitted),
        "job_running": as_dict(capture.running) if capture.running else None,
        "redis_leases": capture.redis_leases,
        "redis_job_keys": capture.redis_job_keys,
        "events": events,
        "replay_calls": [{"method": c.method, "requests": [as_dict(r) for r in c.requests],
                          "responses": [as_dict(r) for r in c.responses]} for c in calls],
        "replay_step_metrics": metrics,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/capture_rl_step"), help="where rl_step.{md,json} go")
    args = parser.parse_args(argv)
    state_dir = Path(tempfile.mkdtemp(prefix="capture-rl-step-"))
    started = time.monotonic()
    try:
        stack = start_stack(state_dir)
        capture = run_job(stack)
        calls, metrics = asyncio.run(replay_first_step(capture.running or capture.submitted, stack))
        doc = document(capture, calls, metrics)
    finally:
        stop_stack(state_dir)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rl_step.json").write_text(json.dumps(doc, indent=1))
    (args.out / "rl_step.md").write_text(markdown(doc))
    print(json.dumps(doc["summary"]["replay_vs_job_step_1"], indent=1))
    print(f"wrote {args.out}/rl_step.{{md,json}} in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
