"""The least spec of each job kind (a row of `defaults.DEFAULTS` names its kind)."""

from __future__ import annotations

from google.protobuf import json_format

from opentinker_api.scheduler.v1 import job_pb2

POLICY = {"model": {"builtin": {"name": "tiny-llama"}}, "adaptation": {"lora": {}},
          "algorithm": {"optimizer": {"learning_rate": 1e-3}}}
TRAINING = {"total_steps": 10, "batch_size": 2, "group_size": 2}
LEAST = {
    "RL": {"type": "JOB_TYPE_RL", "policy": POLICY, "environment": {"env_name": "math"}, "training": TRAINING},
    "SFT": {"type": "JOB_TYPE_SFT", "policy": POLICY, "dataset": {"path": "chats.jsonl"},
            "training": {"total_steps": 10, "batch_size": 2}},
    "INFERENCE": {"type": "JOB_TYPE_INFERENCE", "policy": {"model": POLICY["model"], "adaptation": {"lora": {}}},
                  "environment": {"env_name": "math"}},
    "SESSION": {"type": "JOB_TYPE_SESSION", "policy": {"model": POLICY["model"], "adaptation": {"lora": {}}}},
    "MULTI_AGENT": {"type": "JOB_TYPE_RL", "agents": [{"agent_id": "black", **POLICY}, {"agent_id": "white", **POLICY}],
                    "environment": {"env_name": "gomoku"}, "training": TRAINING},
}


def least_spec(kind: str, **fields: object) -> job_pb2.JobSpec:
    """The least spec of `kind` with `fields` set (dotted paths: `policy.sampling.seed`; in a
    multi-agent spec `policy.` means every agent)."""
    spec = json_format.ParseDict(LEAST[kind], job_pb2.JobSpec())
    for path, value in fields.items():
        for message, name in _targets(spec, path):
            setattr(message, name, value)
    return spec


def _targets(spec: job_pb2.JobSpec, path: str) -> list[tuple[object, str]]:
    head, _, name = path.rpartition(".")
    parts = head.split(".")
    roots = list(spec.agents) if parts[0] == "policy" and spec.agents else [spec]
    if parts[0] == "policy" and spec.agents:
        parts = parts[1:]
    targets = []
    for root in roots:
        message = root
        for part in parts:
            message = getattr(message, part)
        targets.append((message, name))
    return targets
