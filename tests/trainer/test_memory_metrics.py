"""The Trainer's memory metrics reach its gRPC answers, which the Coordinator merges into a job's
step metrics as they are (`trainer/peak_memory_mb`: OptimStep's, the whole step's, wins)."""

from __future__ import annotations

from pathlib import Path

import grpc

from opentinker_api.trainer.v1 import trainer_service_pb2 as pb
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as pb_grpc
from opentinker_trainer.memory import MICRO_BATCH_TOKENS, PEAK_MEMORY
from opentinker_trainer.settings import TrainerSettings
from tests.trainer._servicer import PPO, ServerThread, create_request, fb_request, lease
from tests.trainer.helpers import rl_datums


def test_forward_backward_and_optim_step_answer_with_the_peak_memory(tmp_path: Path) -> None:
    settings = TrainerSettings(auth="disabled", port=0, checkpoint_dir=tmp_path, device="cpu")
    with ServerThread(settings) as address, grpc.insecure_channel(address) as channel:
        stub = pb_grpc.TrainerServiceStub(channel)
        sid = stub.CreateSession(create_request(lora=True)).session.session_id
        fb = stub.ForwardBackward(fb_request(sid, rl_datums(count=4, length=16), loss=PPO))
        step = stub.OptimStep(pb.OptimStepRequest(session_id=sid, lease=lease()))
    assert fb.metrics[PEAK_MEMORY] > 0 and fb.metrics[MICRO_BATCH_TOKENS] >= 256
    assert step.metrics[PEAK_MEMORY] >= fb.metrics[PEAK_MEMORY]  # the step's peak covers its calls
    assert {"entropy", "clip_fraction"} <= fb.metrics.keys() and "grad_norm" in step.metrics
