import asyncio
import io
import json

import pytest

from opentinker_coordinator.driver.env_outages import EnvironmentBroken, OutageBudget
from opentinker_coordinator.driver.inference_driver import InferencePorts, InOrderWriter, run_inference
from opentinker_coordinator.driver.plans import InferencePlan, RlPlan, SftPlan
from opentinker_coordinator.driver.rl_driver import RlPorts, StopRequested, run_rl
from opentinker_coordinator.driver.sft_driver import SftPorts, batches, run_sft
from opentinker_coordinator.types import CheckpointRef, Datum, StopReason, Trajectory
from tests.coordinator.fakes import RecordingReporter, RecordingTrainer, ScriptedRollout, VersionSync


def rl_ports(reporter=None, stop=None):
    rollout = ScriptedRollout(learns_at=2)
    stop = stop or asyncio.Event()
    return RlPorts(trainer=RecordingTrainer(), rollout=rollout, weights=VersionSync(rollout),
                   reporter=reporter or RecordingReporter(), stop=stop)


def test_rl_driver_runs_every_phase_in_order_and_reports_metrics():
    ports = rl_ports()
    plan = RlPlan(job_id="j", total_steps=3, batch_size=2, group_size=4, eval_every_steps=2,
                  checkpoint_every_steps=2, eval_episodes=5)
    asyncio.run(run_rl(plan, ports))
    phases = [e[1] for e in ports.reporter.events if e[0] == "progress"]
    assert phases[:5] == ["SETUP", "EVAL", "ROLLOUT", "UPDATE", "WEIGHT_SYNC"]
    assert phases[-2:] == ["EVAL", "FINISHED"]
    assert ports.trainer.steps == [1, 2, 3]
    # 2 problems x 4 episodes per step; eval plays 5 problems once, greedily
    assert ports.rollout.calls[1] == (2, 4, False) and ports.rollout.calls[0] == (5, 1, True)
    assert [len(b) for b in ports.trainer.batches] == [8, 8, 8]
    step_metrics = {e[1]: e[2] for e in ports.reporter.events if e[0] == "metrics" and "reward/mean" in e[2]}
    assert sorted(step_metrics) == [1, 2, 3]
    assert step_metrics[1]["reward/mean"] == 0.5 and step_metrics[3]["reward/mean"] == 1.0
    assert {"loss", "grad_norm", "tokens_per_second", "time/rollout_s", "time/update_s", "policy_version"} <= set(step_metrics[2])
    assert ("step-2", False) in ports.trainer.checkpoints and ports.trainer.checkpoints[-1] == ("final", True)
    assert ports.reporter.finished == (True, "eval accuracy 1.000 over 5 episodes")


def test_rl_driver_stops_at_a_phase_boundary():
    stop = asyncio.Event()
    reporter = RecordingReporter(stop_after_metrics=2, stop=stop)  # baseline eval + step 1
    ports = rl_ports(reporter=reporter, stop=stop)
    with pytest.raises(StopRequested):
        asyncio.run(run_rl(RlPlan(job_id="j", total_steps=5, batch_size=1, group_size=2), ports))
    assert ports.trainer.steps == [1]
    assert reporter.finished is None


def test_sft_batches_cover_every_example_each_epoch():
    examples = [Datum(tokens=[i], loss_mask=[1.0]) for i in range(5)]
    stream = batches(examples, 2, seed=3)
    epoch = [next(stream) for _ in range(3)]
    assert [len(b) for b in epoch] == [2, 2, 1]
    assert sorted(d.tokens[0] for b in epoch for d in b) == [0, 1, 2, 3, 4]


def test_sft_driver_trains_total_steps_and_saves_a_final_model():
    trainer, reporter = RecordingTrainer(), RecordingReporter()
    examples = [Datum(tokens=[1, i], loss_mask=[0.0, 1.0]) for i in range(3)]
    asyncio.run(run_sft(SftPlan(job_id="j", total_steps=4, batch_size=2), SftPorts(
        trainer=trainer, reporter=reporter, stop=asyncio.Event()), examples))
    assert trainer.steps == [1, 2, 3, 4] and trainer.checkpoints == [("final", True)]
    assert reporter.finished == (True, "trained 4 steps")


def test_sft_driver_stops_once_the_windowed_loss_reaches_the_target():
    # the fake trainer's loss at step n is 1/n: the mean over steps 1..10 is 0.293, over 2..11 0.202
    trainer, reporter = RecordingTrainer(), RecordingReporter()
    examples = [Datum(tokens=[1, i], loss_mask=[0.0, 1.0]) for i in range(3)]
    plan = SftPlan(job_id="j", total_steps=30, batch_size=2, target_loss=0.25)
    asyncio.run(run_sft(plan, SftPorts(trainer=trainer, reporter=reporter, stop=asyncio.Event()), examples))
    assert trainer.steps == list(range(1, 12)) and trainer.checkpoints == [("final", True)]
    assert reporter.finished[0] is True
    assert reporter.finished[1].startswith("reached target loss 0.25 (mean of the last 10 steps 0.2020) "
                                           "after 11 of at most 30 steps")
    finished = [e for e in reporter.events if e[0] == "progress" and e[1] == "FINISHED"]
    assert finished and finished[-1][2] == 11


def test_sft_driver_refuses_an_empty_dataset():
    with pytest.raises(ValueError, match="no usable examples"):
        asyncio.run(run_sft(SftPlan(job_id="j", total_steps=1, batch_size=1), SftPorts(
            trainer=RecordingTrainer(), reporter=RecordingReporter(), stop=asyncio.Event()), []))


def test_inference_driver_writes_one_line_per_episode(tmp_path):
    output = tmp_path / "out" / "results.jsonl"
    reporter = RecordingReporter()
    plan = InferencePlan(job_id="j", num_episodes=4, output_path=str(output))
    asyncio.run(run_inference(plan, InferencePorts(rollout=ScriptedRollout(), reporter=reporter, stop=asyncio.Event())))
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert [line["group_id"] for line in lines] == ["eval-0", "eval-1", "eval-2", "eval-3"]
    assert {"prompt", "transcript", "reward", "stop_reason", "correct"} <= set(lines[0])
    assert reporter.finished[0] is True and reporter.finished[1].endswith("; accuracy 1.000 over 4 episodes")


def test_inference_lines_follow_request_order_when_episodes_finish_out_of_order():
    sink = io.StringIO()
    writer = InOrderWriter(["eval-0", "eval-1", "eval-2"], sink)
    written = lambda: [json.loads(line)["group_id"] for line in sink.getvalue().splitlines()]  # noqa: E731
    writer.add(finished("eval-2"))
    assert written() == []  # eval-2 waits for eval-0 and eval-1
    writer.add(finished("eval-0"))
    assert written() == ["eval-0"]
    writer.add(finished("eval-1"))
    assert written() == ["eval-0", "eval-1", "eval-2"]


def finished(group_id: str) -> Trajectory:
    return Trajectory(group_id=group_id, token_ids=[1, 2], loss_mask=[0, 1], sampling_logprobs=[0.0, -0.1],
                      total_reward=1.0, stop_reason=StopReason.DONE)


def test_a_resumed_rl_job_loads_its_checkpoint_syncs_weights_and_continues_at_its_step():
    ports = rl_ports()
    plan = RlPlan(job_id="j", total_steps=4, batch_size=2, group_size=2, eval_episodes=3,
                  resume=CheckpointRef(checkpoint_id="j-step-2", step=2))
    asyncio.run(run_rl(plan, ports))
    assert ports.trainer.loaded == ["j-step-2"]
    assert ports.trainer.steps == [3, 4]  # steps 1-2 were done by the earlier attempt
    assert ports.rollout.calls[0] == (2, 2, False)  # no baseline eval: straight to training
    assert ports.rollout.version >= 1  # the restored weights were pushed before the first rollout
    logs = [e for e in ports.reporter.events if e[0] == "log"]
    assert logs == [("log", "WARNING", "resumed from checkpoint j-step-2 at step 2")]
    assert sorted(e[1] for e in ports.reporter.events if e[0] == "metrics") == [3, 4, 4]


def test_a_resumed_sft_job_skips_the_batches_it_already_trained_on():
    examples = [Datum(tokens=[1, i], loss_mask=[0.0, 1.0]) for i in range(6)]
    fresh, resumed = RecordingTrainer(), RecordingTrainer()
    asyncio.run(run_sft(SftPlan(job_id="j", total_steps=5, batch_size=2, seed=7),
                        SftPorts(trainer=fresh, reporter=RecordingReporter(), stop=asyncio.Event()), examples))
    reporter = RecordingReporter()
    plan = SftPlan(job_id="j", total_steps=5, batch_size=2, seed=7, resume=CheckpointRef(checkpoint_id="c", step=3))
    asyncio.run(run_sft(plan, SftPorts(trainer=resumed, reporter=reporter, stop=asyncio.Event()), examples))
    assert resumed.loaded == ["c"] and resumed.steps == [4, 5]
    assert [[d.tokens for d in b] for b in resumed.batches] == [[d.tokens for d in b] for b in fresh.batches[3:]]
    assert reporter.finished == (True, "trained 5 steps")


class OutageRollout(ScriptedRollout):
    """Every training episode of the first `outages` training batches fails (an EnvHost outage)."""

    def __init__(self, outages: int) -> None:
        super().__init__(learns_at=2)
        self.outages = outages

    async def run_episodes(self, requests, group_size, *, evaluation):
        failing = not evaluation and self.outages > 0
        if failing:
            self.outages -= 1
        async for trajectory in super().run_episodes(requests, group_size, evaluation=evaluation):
            if failing:
                trajectory = Trajectory(group_id=trajectory.group_id, token_ids=[1], loss_mask=[0],
                                        sampling_logprobs=[0.0], total_reward=0.0, stop_reason=StopReason.ENV_ERROR)
            yield trajectory


def outage_ports(outages: int) -> RlPorts:
    rollout = OutageRollout(outages)
    return RlPorts(trainer=RecordingTrainer(), rollout=rollout, weights=VersionSync(rollout),
                   reporter=RecordingReporter(), stop=asyncio.Event())


QUICK_RETRIES = OutageBudget(seconds=5.0, initial_delay=0.01, max_delay=0.01, broken_game_delay=0.01)


def test_a_batch_whose_episodes_all_failed_is_collected_again_and_the_step_is_taken_once():
    ports = outage_ports(outages=2)
    asyncio.run(run_rl(RlPlan(job_id="j", total_steps=2, batch_size=1, group_size=2, env_outage=QUICK_RETRIES), ports))
    assert ports.trainer.steps == [1, 2]
    assert [len(b) for b in ports.trainer.batches] == [2, 2]  # trained on the good batch only
    warnings = [e[2] for e in ports.reporter.events if e[0] == "log" and e[1] == "warning"]
    assert len(warnings) == 2 and all("collecting them again" in w for w in warnings), warnings
    step_1 = next(e[2] for e in ports.reporter.events if e[0] == "metrics" and e[1] == 1 and "reward/mean" in e[2])
    assert step_1["env_errors"] == 4 and step_1["rollout_retries"] == 2


def test_a_step_whose_episodes_keep_failing_fails_the_job_instead_of_an_empty_update():
    ports = outage_ports(outages=10)
    with pytest.raises(EnvironmentBroken, match="step 1: no usable episode with the environment up, 3 times"):
        asyncio.run(run_rl(RlPlan(job_id="j", total_steps=2, batch_size=1, group_size=2, env_outage=QUICK_RETRIES),
                           ports))
    assert ports.trainer.steps == []


def test_a_steps_metrics_are_reported_before_its_checkpoint():
    """A run that dies between the two resumes from the previous checkpoint and reports the step
    again; the other order would lose the step's metrics for good (seen under fault injection)."""
    ports = rl_ports()
    asyncio.run(run_rl(RlPlan(job_id="j", total_steps=3, batch_size=1, group_size=2, checkpoint_every_steps=1), ports))
    order = [(e[0], e[2] if e[0] == "checkpoint" else e[1]) for e in ports.reporter.events
             if e[0] == "checkpoint" or (e[0] == "metrics" and "reward/mean" in e[2])]
    assert [step for kind, step in order if kind == "metrics"] == [1, 2, 3]
    for step in (1, 2, 3):
        assert order.index(("metrics", step)) < order.index(("checkpoint", step)), order
