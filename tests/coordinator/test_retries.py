"""CallGuard: UNAVAILABLE is retried within a budget and told to the job's events; a worker that
forgot the job (NOT_FOUND) or stays away is WorkerLost; a stopped run stops retrying."""

import asyncio

import grpc
import pytest
from grpc.aio import AioRpcError, Metadata

from opentinker_coordinator.adapters.retries import CallGuard, Interrupted, RetryBudget, WorkerLost

FAST = RetryBudget(seconds=5.0, initial_delay=0.001, max_delay=0.005)


def rpc_error(code: grpc.StatusCode) -> AioRpcError:
    return AioRpcError(code, Metadata(), Metadata(), details=f"{code.name.lower()} for the test")


class Flaky:
    """Fails with `code` `failures` times, then answers "ok"."""

    def __init__(self, failures: int, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> None:
        self.failures, self.code, self.calls = failures, code, 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise rpc_error(self.code)
        return "ok"


def test_unavailable_is_retried_and_the_outage_and_recovery_are_told():
    told = []

    async def notify(level, message):
        told.append((level, message))

    flaky = Flaky(failures=3)
    guard = CallGuard(peer="trainer", budget=FAST, notify=notify)
    assert asyncio.run(guard.call("OptimStep", flaky)) == "ok"
    assert flaky.calls == 4
    assert [level for level, _ in told] == ["warning", "info"]
    assert "trainer call OptimStep interrupted (UNAVAILABLE" in told[0][1]
    assert "succeeded after 3 retries" in told[1][1]


def test_other_codes_are_answers_not_outages():
    flaky = Flaky(failures=1, code=grpc.StatusCode.INVALID_ARGUMENT)
    with pytest.raises(AioRpcError) as raised:
        asyncio.run(CallGuard(peer="trainer", budget=FAST).call("OptimStep", flaky))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT and flaky.calls == 1


def test_a_worker_that_forgot_the_job_is_lost():
    with pytest.raises(WorkerLost, match="rollout lost: NOT_FOUND"):
        asyncio.run(CallGuard(peer="rollout", budget=FAST).call("RunEpisodes", Flaky(1, grpc.StatusCode.NOT_FOUND)))


def test_a_worker_unreachable_past_the_budget_is_lost():
    guard = CallGuard(peer="trainer", budget=RetryBudget(seconds=0.05, initial_delay=0.01, max_delay=0.01))
    flaky = Flaky(failures=10_000)
    with pytest.raises(WorkerLost, match="trainer lost: UNAVAILABLE"):
        asyncio.run(guard.call("ForwardBackward", flaky))
    assert flaky.calls > 1


def test_the_schedulers_errors_pass_through_and_its_outage_waits_to_be_told():
    guard = CallGuard(peer="scheduler", budget=FAST)
    assert asyncio.run(guard.call("ReportJobEvents", Flaky(2))) == "ok"
    assert [level for level, _ in guard.untold] == ["warning", "info"]
    with pytest.raises(AioRpcError):
        asyncio.run(guard.call("GetJob", Flaky(1, grpc.StatusCode.NOT_FOUND)))


def test_a_stopped_run_stops_retrying():
    async def scenario():
        stop = asyncio.Event()
        guard = CallGuard(peer="trainer", budget=RetryBudget(seconds=60, initial_delay=0.05, max_delay=0.05), stop=stop)
        asyncio.get_running_loop().call_later(0.1, stop.set)
        await guard.call("OptimStep", Flaky(failures=10_000))

    with pytest.raises(Interrupted):
        asyncio.run(scenario())
