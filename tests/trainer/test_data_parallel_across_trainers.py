"""A data-parallel session across two Trainers (two gRPC servers standing for two hosts, on
loopback): rank 0's Trainer asks the other (StartReplicas) to start rank 1, which connects back
and joins the gloo group. It trains exactly as a 2-rank session on one Trainer: bit-equal
weights after the same steps. Closing the session ends the other Trainer's rank; a peer that
refuses leaves nothing behind and the caller hears why. The multi-host stack test
(tests/chaos/test_multihost_data_parallel.py) runs the same across network namespaces."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import psutil
import pytest
import torch
from safetensors.torch import load_file

from opentinker_api.trainer.v1 import trainer_service_pb2 as pb
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as pb_grpc
from opentinker_trainer.settings import TrainerSettings
from tests.trainer._servicer import PPO, ServerThread, create_request, datum_messages, lease
from tests.trainer.helpers import rl_datums

pytestmark = pytest.mark.timeout(300)
JOB = "job-dp"


def trainer(root: Path, cpu_slots: int) -> ServerThread:
    return ServerThread(TrainerSettings(auth="disabled", port=0, checkpoint_dir=root, device="cpu",
                                        cpu_slots=cpu_slots))


@pytest.fixture(scope="module")
def trainers(tmp_path_factory) -> Iterator[tuple[pb_grpc.TrainerServiceStub, pb_grpc.TrainerServiceStub, str, Path]]:
    """(rank 0's Trainer with two CPU slots, a second Trainer, its address, the shared checkpoint root)."""
    root = tmp_path_factory.mktemp("checkpoints")
    with trainer(root, 2) as first, trainer(root, 1) as second, \
            grpc.insecure_channel(first) as a, grpc.insecure_channel(second) as b:
        yield pb_grpc.TrainerServiceStub(a), pb_grpc.TrainerServiceStub(b), second, root


def peer(address: str, device: str = "cpu:0", token: int = 1) -> pb.ReplicaPeer:
    return pb.ReplicaPeer(address=address, device_ids=[device], lease=lease(token=token, job=JOB))


def train_and_save(stub: pb_grpc.TrainerServiceStub, session_id: str, steps: int, name: str) -> dict[str, torch.Tensor]:
    for step in range(steps):
        datums = datum_messages(rl_datums(count=5, length=12, seed=step))
        stub.ForwardBackward(pb.ForwardBackwardRequest(session_id=session_id, lease=lease(job=JOB), datums=datums,
                                                       loss=PPO))
        stub.OptimStep(pb.OptimStepRequest(session_id=session_id, lease=lease(job=JOB)))
    saved = stub.SaveCheckpoint(pb.SaveCheckpointRequest(
        session_id=session_id, lease=lease(job=JOB), format=pb.CHECKPOINT_FORMAT_HF_MODEL, name=name))
    return load_file(next(Path(saved.checkpoint.path).rglob("*.safetensors")))


def replica_processes() -> set[psutil.Process]:
    return {p for p in psutil.Process().children(recursive=True) if "multiprocessing" in " ".join(p.cmdline())}


def test_two_ranks_on_two_trainers_train_bit_equal_to_two_ranks_on_one(trainers) -> None:
    first, _, second_address, _ = trainers
    local = first.CreateSession(create_request(job=JOB, lease=lease(job=JOB), device_ids=["cpu:0", "cpu:1"])).session
    expected = train_and_save(first, local.session_id, 3, "one-trainer")
    first.CloseSession(pb.CloseSessionRequest(session_id=local.session_id, lease=lease(job=JOB)))

    before = replica_processes()
    spread = first.CreateSession(create_request(job=JOB, lease=lease(job=JOB), device_ids=["cpu:0"],
                                                peers=[peer(second_address)])).session
    started = replica_processes() - before
    assert len(started) == 1  # rank 1, spawned by the second Trainer
    actual = train_and_save(first, spread.session_id, 3, "two-trainers")
    assert actual.keys() == expected.keys()
    assert all(torch.equal(actual[name], expected[name]) for name in expected)
    # a training state holds every rank's RNG (rank 1's comes from the other Trainer's process,
    # by value), and loads back into both ranks
    state = first.SaveCheckpoint(pb.SaveCheckpointRequest(session_id=spread.session_id, lease=lease(job=JOB),
                                                          format=pb.CHECKPOINT_FORMAT_TRAINING_STATE, name="state"))
    saved = torch.load(Path(state.checkpoint.path) / "training_state.pt", weights_only=False)
    assert len(saved["replica_rng_states"]) == 1
    first.LoadCheckpoint(pb.LoadCheckpointRequest(session_id=spread.session_id, lease=lease(job=JOB),
                                                  checkpoint_id=state.checkpoint.checkpoint_id))
    first.CloseSession(pb.CloseSessionRequest(session_id=spread.session_id, lease=lease(job=JOB)))
    _, alive = psutil.wait_procs(list(started), timeout=10)
    assert alive == []  # the other Trainer's rank ended with the session


def test_a_peer_that_refuses_fails_the_session_with_its_reason_and_leaves_nothing_running(trainers) -> None:
    first, _, second_address, _ = trainers
    before = replica_processes()
    with pytest.raises(grpc.RpcError) as caught:
        first.CreateSession(create_request(job=JOB, lease=lease(job=JOB), device_ids=["cpu:0"],
                                           peers=[peer(second_address, device="cpu:7")]))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert second_address in caught.value.details() and "cpu:7" in caught.value.details()
    time.sleep(0.5)
    assert replica_processes() - before == set()


def test_an_unreachable_peer_is_unavailable_and_a_malformed_one_invalid(trainers) -> None:
    first, second, _, _ = trainers
    with pytest.raises(grpc.RpcError) as caught:
        first.CreateSession(create_request(job=JOB, lease=lease(job=JOB), device_ids=["cpu:0"],
                                           peers=[peer("127.0.0.1:1")]))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE, caught.value.details()
    with pytest.raises(grpc.RpcError) as caught:
        first.CreateSession(create_request(job=JOB, lease=lease(job=JOB), device_ids=["cpu:0"],
                                           peers=[pb.ReplicaPeer(address="127.0.0.1:2", lease=lease(job=JOB))]))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "peers[0]" in caught.value.details()
    with pytest.raises(grpc.RpcError) as caught:
        second.StartReplicas(pb.StartReplicasRequest(lease=lease(job=JOB), device_ids=["cpu:0"], first_rank=1,
                                                     world_size=2, store_address="nowhere",
                                                     command_address="127.0.0.1:9", authkey=b"k" * 32))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "store_address" in caught.value.details()
