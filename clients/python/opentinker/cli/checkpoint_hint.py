"""What the CLI prints about a job's checkpoint when the job ends (`run`, `watch`, `jobs cancel`)
and in `jobs get`: its id and how to train from it.

    final checkpoint: job-1c2f...-final (step 40)
    train from it (e.g. RL after SFT) with, in the next job spec:
      policy: {model: {checkpoint: {checkpoint_id: job-1c2f...-final}}}

A multi-agent job prints one line per agent. A job that did not succeed (or still runs) prints its
last checkpoint (a cancelled run's latest weights); a job that saved none prints nothing.
"""

from __future__ import annotations

from opentinker_api.scheduler.v1 import job_pb2


def checkpoint_lines(job: job_pb2.Job) -> list[str]:
    """The lines to print after the job's final line (none when it saved no checkpoint)."""
    saved = job.resume_from
    if not saved.checkpoint_id and not saved.agent_checkpoint_ids:
        return []
    which = "final" if job.state == job_pb2.Job.STATE_SUCCEEDED else "last"
    if saved.agent_checkpoint_ids:
        agents = sorted(saved.agent_checkpoint_ids.items())
        lines = [f"{which} checkpoint of agent {agent}: {checkpoint_id} (step {saved.step})"
                 for agent, checkpoint_id in agents]
        agent, checkpoint_id = agents[0]
        example = f"agents: [{{agent_id: {agent}, model: {_model(checkpoint_id)}}}, ...]"
        return [*lines, "train from one with, in the next job spec:", f"  {example}"]
    return [f"{which} checkpoint: {saved.checkpoint_id} (step {saved.step})",
            "train from it (e.g. RL after SFT) with, in the next job spec:",
            f"  policy: {{model: {_model(saved.checkpoint_id)}}}"]


def _model(checkpoint_id: str) -> str:
    """The spec's `model` naming the checkpoint, in YAML flow style."""
    return f"{{checkpoint: {{checkpoint_id: {checkpoint_id}}}}}"
