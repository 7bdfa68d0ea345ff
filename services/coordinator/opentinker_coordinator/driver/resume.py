"""Where a job's attempt starts: step 0, or the checkpoint an earlier attempt saved.

The Scheduler re-queues a job whose worker died and hands the next attempt the job's last
reported checkpoint (`Job.resume_from`). A TRAINING_STATE checkpoint restores weights, AdamW
state, RNG and step, so the resumed run continues as if never interrupted; episodes and SFT
batches are derived from (seed, step), so the data continues where it stopped too.
"""

from __future__ import annotations

from opentinker_coordinator.driver.ports import ReporterPort, TrainerPort
from opentinker_coordinator.types import CheckpointRef


async def resume_step(resume: CheckpointRef | None, trainer: TrainerPort, reporter: ReporterPort) -> int:
    """Load `resume` into the opened trainer session; the step to continue from (0 if none)."""
    if resume is None:
        return 0
    await trainer.load_checkpoint(resume.checkpoint_id)
    await reporter.log("WARNING", f"resumed from checkpoint {resume.checkpoint_id} at step {resume.step}")
    return resume.step
