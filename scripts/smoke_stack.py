"""Call every service of a running local stack through the generated stubs.

    python scripts/smoke_stack.py [--state-dir .opentinker]

For each service: health SERVING, server reflection lists its v1 service, and
one API call answers without a transport failure. Exit 1 on any miss.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from opentinker_api.coordinator.v1 import coordinator_service_pb2 as coordinator_pb
from opentinker_api.coordinator.v1 import coordinator_service_pb2_grpc as coordinator_grpc
from opentinker_api.envhost.v1 import envhost_service_pb2 as envhost_pb
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as envhost_grpc
from opentinker_api.rollout.v1 import rollout_service_pb2 as rollout_pb
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as rollout_grpc
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as scheduler_pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as scheduler_grpc
from opentinker_api.trainer.v1 import trainer_service_pb2 as trainer_pb
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as trainer_grpc
from opentinker.cli import state
from opentinker.cli.health_probe import SERVING, check_health
from opentinker.client.channels import keyed_channel
from opentinker.client.credentials import admin_key_path

# service -> (full service name, a call to make on a channel)
CALLS = {
    "scheduler": ("opentinker.scheduler.v1.SchedulerService",
                  lambda ch: scheduler_grpc.SchedulerServiceStub(ch).ListWorkers(scheduler_pb.ListWorkersRequest(), timeout=5)),
    "trainer": ("opentinker.trainer.v1.TrainerService",
                lambda ch: trainer_grpc.TrainerServiceStub(ch).GetSession(trainer_pb.GetSessionRequest(), timeout=5)),
    "rollout": ("opentinker.rollout.v1.RolloutService",
                lambda ch: rollout_grpc.RolloutServiceStub(ch).Sample(rollout_pb.SampleRequest(), timeout=5)),
    "envhost": ("opentinker.envhost.v1.EnvHostService",
                lambda ch: envhost_grpc.EnvHostServiceStub(ch).ListEnvironments(envhost_pb.ListEnvironmentsRequest(), timeout=5)),
    "coordinator": ("opentinker.coordinator.v1.CoordinatorService",
                    lambda ch: coordinator_grpc.CoordinatorServiceStub(ch).GetRun(coordinator_pb.GetRunRequest(), timeout=5)),
}


def reflected_services(channel: grpc.Channel) -> set[str]:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    response = next(stub.ServerReflectionInfo(iter([request]), timeout=5))
    return {s.name for s in response.list_services_response.service}


def call_outcome(call, channel: grpc.Channel) -> str:
    try:
        call(channel)
    except grpc.RpcError as error:
        return f"{error.code().name}: {error.details()}"
    return "OK"


def check_service(name: str, address: str, api_key: str) -> list[str]:
    full_name, call = CALLS[name]
    problems = []
    health = check_health(address)
    if health != SERVING:
        problems.append(f"{name}: health is {health}")
    with grpc.insecure_channel(address) as channel:
        if full_name not in reflected_services(channel):
            problems.append(f"{name}: reflection does not list {full_name}")
        if call_outcome(call, channel) != "UNAUTHENTICATED: missing API key: send the metadata " \
                "'authorization: Bearer <api key>'":
            problems.append(f"{name}: a call without an API key was not refused as UNAUTHENTICATED")
    with keyed_channel(address, api_key) as channel:
        outcome = call_outcome(call, channel)
    print(f"{name:<12} {address:<22} health={health:<8} reflection=ok  call -> {outcome}")
    if outcome.startswith(("UNAVAILABLE", "DEADLINE_EXCEEDED", "INTERNAL", "UNKNOWN")):
        problems.append(f"{name}: call failed: {outcome}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, default=Path(".opentinker"))
    args = parser.parse_args(argv)
    record = state.load(args.state_dir)
    if record is None:
        print(f"no stack recorded in {args.state_dir}; run: opentinker up", file=sys.stderr)
        return 1
    api_key = admin_key_path(args.state_dir).read_text().strip()
    problems = [p for proc in record.processes if proc.name in CALLS
                for p in check_service(proc.name, proc.address, api_key)]
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
