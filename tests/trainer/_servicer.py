"""The Trainer servicer's test kit (test_servicer.py and the loss, mask, expiry and memory tests):
a Trainer served in a thread on a free port, its stub (a module fixture), and the requests the
tests send."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import grpc
import pytest

from opentinker_api.common.v1 import algorithm_pb2 as algo_pb
from opentinker_api.common.v1 import datum_pb2, model_pb2, resources_pb2
from opentinker_api.trainer.v1 import trainer_service_pb2 as pb
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as pb_grpc
from opentinker_runtime.core.server import start_server, stop_server
from opentinker_trainer.main import build_plan
from opentinker_trainer.settings import TrainerSettings
from tests.trainer.helpers import MODEL, sft_datums

CE = algo_pb.LossConfig(function=algo_pb.LOSS_FUNCTION_CROSS_ENTROPY)
PPO = algo_pb.LossConfig(function=algo_pb.LOSS_FUNCTION_PPO_CLIP, clip_low=0.2, clip_high=0.2)


class ServerThread:
    """The Trainer's ServerPlan served by core.server on its own event loop thread."""

    def __init__(self, settings: TrainerSettings) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        started = self._call(self._start())
        self.started = started
        return f"127.0.0.1:{started.port}"

    def __exit__(self, *exc: object) -> None:
        self._call(stop_server(self.started, grace_seconds=1))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)

    async def _start(self):
        return await start_server(self.settings, await build_plan(self.settings))

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=30)


@pytest.fixture(scope="module")
def stub(tmp_path_factory) -> Iterator[pb_grpc.TrainerServiceStub]:
    checkpoints = tmp_path_factory.mktemp("checkpoints")
    settings = TrainerSettings(auth="disabled", port=0, checkpoint_dir=checkpoints, device="cpu")  # CPU: FB takes a while
    with ServerThread(settings) as address:
        with grpc.insecure_channel(address) as channel:
            yield pb_grpc.TrainerServiceStub(channel)


def lease(token: int = 1, job: str = "job-1") -> resources_pb2.LeaseContext:
    return resources_pb2.LeaseContext(job_id=job, lease_id="lease-1", fencing_token=token)


def create_request(job: str = "job-1", *, lora: bool = False, model: str = MODEL,
                   **overrides) -> pb.CreateSessionRequest:
    adaptation = model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(rank=4)) if lora else \
        model_pb2.Adaptation(full=model_pb2.FullAdaptation(keep_reference=True))
    fields = dict(lease=lease(job=job), adaptation=adaptation, seed=3,
                  base_model=model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name=model)),
                  optimizer=algo_pb.OptimizerConfig(learning_rate=1e-2, max_grad_norm=1.0))
    return pb.CreateSessionRequest(**{**fields, **overrides})


def datum_messages(datums) -> list[datum_pb2.Datum]:
    return [datum_pb2.Datum(tokens=d.tokens, loss_mask=d.loss_mask, advantages=d.advantages,
                            sampling_logprobs=d.sampling_logprobs) for d in datums]


def fb_request(sid: str, datums=None, loss=CE, token: int = 1, job: str = "job-1", **extra):
    return pb.ForwardBackwardRequest(session_id=sid, lease=lease(token, job), loss=loss,
                                     datums=datum_messages(datums or sft_datums()), **extra)


def logprob_rows(response) -> list[list[float]]:
    return [list(row.logprobs) for row in response.logprobs]


def call_error(call, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        result = call(request)
        if hasattr(result, "__iter__"):
            list(result)
    return raised.value
