"""Data-parallel sessions: 2 CPU ranks (a replica process joined over gloo) train like one
process, stay identical, checkpoint every rank's RNG and stop their processes on close."""

from __future__ import annotations

import pytest
import torch

from opentinker_runtime.ml.checkpoints import CheckpointFormat
from opentinker_runtime.ml.sources import LoraSpec
from opentinker_trainer.checkpointing import load_checkpoint, save_checkpoint
from opentinker_trainer.config import LossConfig, LossFunction
from opentinker_trainer.collectives import shard_datums
from opentinker_trainer.session_factory import create_session
from tests.trainer.helpers import rl_datums, rows_close, spec, weights

PPO = LossConfig(function=LossFunction.PPO_CLIP, clip_low=0.2, clip_high=0.2, entropy_coef=0.01)
TWO_CPUS = ("cpu:0", "cpu:1")

pytestmark = pytest.mark.timeout(240)


def test_shards_are_balanced_by_tokens_and_cover_every_datum_once() -> None:
    shards = shard_datums([10, 3, 8, 7, 2], 2)
    assert shards == [[0, 1, 4], [2, 3]]  # 10+3+2 = 15 tokens vs 8+7 = 15
    assert shard_datums([5], 3) == [[0], [], []]
    assert sorted(i for shard in shard_datums(list(range(1, 12)), 3) for i in shard) == list(range(11))


def train(session, steps: int) -> list[float]:
    losses = []
    for step in range(steps):
        losses.append(session.forward_backward(rl_datums(count=5, length=12, seed=step), PPO).loss)
        session.optim_step()
    return losses


@pytest.mark.parametrize("lora", [LoraSpec(rank=4, alpha=8), None], ids=["lora", "full"])
def test_two_ranks_train_like_one_process(tmp_path, lora) -> None:
    """Adam's first steps divide by sqrt(v) + 1e-8, so gradients of ~1e-9 that differ in the
    last bits (the ranks sum in another order) move weights by up to ~1e-4 differently: the
    weights are compared at 1e-3, against updates of ~1e-2."""
    single = create_session("one", spec(lora=lora, seed=3), checkpoint_root=tmp_path)
    initial = weights(single)
    parallel = create_session("two", spec(lora=lora, seed=3), checkpoint_root=tmp_path,
                              device_ids=TWO_CPUS)
    try:
        assert parallel.world_size == 2 and parallel.view().device_ids == TWO_CPUS
        datums = rl_datums(count=5, length=12, seed=9)
        first_single, first_parallel = single.forward_backward(datums, PPO), \
            parallel.forward_backward(datums, PPO)
        assert first_parallel.loss == pytest.approx(first_single.loss, rel=1e-5)
        assert rows_close(first_parallel.logprobs, first_single.logprobs)
        assert first_parallel.metrics.keys() == first_single.metrics.keys()
        for name, value in first_single.metrics.items():
            assert first_parallel.metrics[name] == pytest.approx(value, rel=1e-4, abs=1e-6), name
        assert parallel.optim_step().grad_norm == pytest.approx(single.optim_step().grad_norm, rel=1e-4)
        assert train(parallel, 3) == pytest.approx(train(single, 3), rel=1e-4)
        ours, theirs = weights(parallel), weights(single)
        assert max((ours[n] - theirs[n]).abs().max().item() for n in ours) < 1e-3
        assert max((initial[n] - theirs[n]).abs().max().item() for n in ours) > 2e-2
        assert parallel.replicas_in_sync()
    finally:
        parallel.close()


def test_training_state_holds_every_ranks_dropout_stream_and_resumes_exactly(tmp_path) -> None:
    lora = LoraSpec(rank=4, alpha=8, dropout=0.2)
    parallel = create_session("two", spec(lora=lora, job_id="dp"), checkpoint_root=tmp_path,
                              device_ids=TWO_CPUS)
    processes = parallel.replicas.local_processes
    try:
        train(parallel, 1)
        record = save_checkpoint(parallel, tmp_path, format=CheckpointFormat.TRAINING_STATE,
                                 data_cursor=b"7")
        state = torch.load(record.path / "training_state.pt", weights_only=True)
        assert len(state["replica_rng_states"]) == 1
        assert not torch.equal(state["replica_rng_states"][0], state["rng_state"])
        expected_losses, expected_weights = train(parallel, 2), weights(parallel)
        assert load_checkpoint(parallel, tmp_path, record.checkpoint_id) == b"7"
        assert train(parallel, 2) == expected_losses  # bit-exact, dropout on both ranks
        assert all(torch.equal(w, expected_weights[n]) for n, w in weights(parallel).items())
        assert parallel.replicas_in_sync()
    finally:
        parallel.close()
    assert not any(process.is_alive() for process in processes)


def test_a_collective_waiting_on_a_silent_rank_fails_after_the_collective_timeout(tmp_path) -> None:
    """A rank that never reaches the gradient sum (stopped with SIGSTOP: a rank host cut off
    mid-step) holds OptimStep for OPENTINKER_TRAINER_COLLECTIVE_TIMEOUT_SECONDS (3 s here), then
    the step fails instead of waiting for good."""
    import os
    import signal
    import time

    parallel = create_session("two", spec(lora=LoraSpec(rank=4, alpha=8)), checkpoint_root=tmp_path,
                              device_ids=TWO_CPUS, collective_timeout_s=3.0)
    replica = parallel.replicas.local_processes[0]
    try:
        parallel.forward_backward(rl_datums(count=4, length=12), PPO)
        os.kill(replica.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="[Tt]imed out"):
            parallel.optim_step()
        assert 2.5 < time.monotonic() - started < 30
    finally:
        if replica.is_alive():
            os.kill(replica.pid, signal.SIGCONT)
        parallel.close()
