"""ServiceClient.fit: the paper's training call, as one RL or SFT job watched to its end.

    client = ServiceClient("127.0.0.1:50051")
    warm = client.fit(dataset="datasets/sft.jsonl", model={"builtin": {"name": "tiny-llama", "seed": 1}},
                      num_steps=40, name="warm-up", algorithm={"optimizer": {"learning_rate": 1e-3}})
    result = client.fit(env="math", model={"checkpoint": {"checkpoint_id": warm.final_checkpoint_id}},
                        num_steps=20, limits={"max_turns": 4}, name="math-rl",
                        on_metrics=lambda step, m: print(step, m.get("reward/mean")))
    print(result.state, result.final_checkpoint_id)    # SUCCEEDED job-...-final

The job runs on the managed services (the Coordinator drives it); fit streams its events
and calls back on metrics and progress, then returns the final job and metric history.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client.scheduler_client import SchedulerClient, state_name

MetricsCallback = Callable[[int, dict[str, float]], None]
EventCallback = Callable[[job_pb2.JobEvent], None]


@dataclass(kw_only=True)
class FitResult:
    job: job_pb2.Job
    history: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    """(step, metrics) in the order they were reported (a multi-agent job's: see agent_history)."""
    checkpoint_ids: list[str] = field(default_factory=list)
    agent_history: dict[str, list[tuple[int, dict[str, float]]]] = field(default_factory=dict)
    """Multi-agent jobs: each agent's (step, metrics), in order."""
    agent_checkpoint_ids: list[dict[str, str]] = field(default_factory=list)
    """Multi-agent jobs: each common checkpoint, agent -> checkpoint id."""

    @property
    def succeeded(self) -> bool:
        return self.job.state == job_pb2.Job.STATE_SUCCEEDED

    @property
    def state(self) -> str:
        """The job's final state by name: "SUCCEEDED", "FAILED" or "CANCELLED" (`job.state` is its number)."""
        return state_name(self.job.state)

    @property
    def final_checkpoint_id(self) -> str:
        return self.checkpoint_ids[-1] if self.checkpoint_ids else ""

    def series(self, name: str) -> list[tuple[int, float]]:
        """(step, value) of one metric, e.g. series("eval/accuracy")."""
        return [(step, values[name]) for step, values in self.history if name in values]

    def agent_series(self, agent_id: str, name: str) -> list[tuple[int, float]]:
        """(step, value) of one agent's metric, e.g. agent_series("alpha", "match/win_rate")."""
        return [(step, values[name]) for step, values in self.agent_history.get(agent_id, []) if name in values]


JOB_TYPES = ("RL", "SFT")


def rl_spec(*, env: str | dict, model: dict, num_steps: int, batch_size: int, group_size: int,
            adaptation: dict | None, algorithm: dict | None, sampling: dict | None,
            training: dict | None, limits: dict | None = None, name: str = "",
            asynchronous: dict | None = None) -> dict:
    environment = {"env_name": env} if isinstance(env, str) else copy.deepcopy(env)
    training_spec = {"total_steps": num_steps, "batch_size": batch_size, "group_size": group_size} | (training or {})
    policy = _policy(model, adaptation, algorithm)
    if sampling:
        policy["sampling"] = sampling
    if limits:
        policy["limits"] = limits
    spec = {"type": "RL", "policy": policy, "environment": environment, "training": training_spec}
    if asynchronous:
        spec["async"] = copy.deepcopy(asynchronous)
    return _named(spec, name)


def sft_spec(*, dataset: str | dict, model: dict, num_steps: int, batch_size: int, adaptation: dict | None,
             algorithm: dict | None, training: dict | None, name: str = "") -> dict:
    data = {"path": dataset} if isinstance(dataset, str) else copy.deepcopy(dataset)
    training_spec = {"total_steps": num_steps, "batch_size": batch_size} | (training or {})
    return _named({"type": "SFT", "policy": _policy(model, adaptation, algorithm), "dataset": data,
                   "training": training_spec}, name)


def _policy(model: dict, adaptation: dict | None, algorithm: dict | None) -> dict:
    return {"model": model, "adaptation": adaptation or {"full": {}}, "algorithm": algorithm or {}}


def _named(spec: dict, name: str) -> dict:
    return spec | {"display_name": name} if name else spec


def fit_job_spec(*, model: dict, env: str | dict | None = None, dataset: str | dict | None = None,
                 job_type: str | None = None, name: str = "", num_steps: int | None = None,
                 num_epochs: int | None = None, steps_per_epoch: int = 10, batch_size: int = 8, group_size: int = 8,
                 adaptation: dict | None = None, algorithm: dict | None = None, sampling: dict | None = None,
                 limits: dict | None = None, training: dict | None = None, asynchronous: dict | None = None) -> dict:
    """The job spec `fit` submits (num_steps, or num_epochs x steps_per_epoch steps).

    RL on `env` (a name or an EnvironmentReference dict), or SFT on `dataset` (a JSONL path or a
    DatasetReference dict); `job_type` ("RL" or "SFT") is whichever of the two is given. `name` is
    the job's display name; `limits` the episode limits of an RL job (AgentLoopLimits: max_turns,
    max_new_tokens_per_turn, max_total_tokens, episode_timeout); `training` more TrainingConfig
    fields; `asynchronous` the RL job's AsyncConfig (the spec's `async`, e.g. {"max_staleness": 1}:
    the next batch's rollouts overlap the update). ValueError for arguments that do not make one job."""
    job_type = _job_type(job_type, env=env, dataset=dataset)
    steps = num_steps if num_steps is not None else (num_epochs or 1) * steps_per_epoch
    if job_type == "SFT":
        if sampling or limits or asynchronous:
            raise ValueError("sampling, limits and asynchronous shape RL episodes; an SFT job (dataset=...) plays none")
        return sft_spec(dataset=dataset, model=model, num_steps=steps, batch_size=batch_size,
                        adaptation=adaptation, algorithm=algorithm, training=training, name=name)
    return rl_spec(env=env, model=model, num_steps=steps, batch_size=batch_size, group_size=group_size,
                   adaptation=adaptation, algorithm=algorithm, sampling=sampling, training=training,
                   limits=limits, name=name, asynchronous=asynchronous)


def _job_type(job_type: str | None, *, env: object, dataset: object) -> str:
    """RL with an env, SFT with a dataset; an explicit job_type must have its input."""
    if job_type is not None and job_type.upper() not in JOB_TYPES:
        raise ValueError(f"job_type must be one of {', '.join(JOB_TYPES)}, got {job_type!r}")
    if job_type is None and env is not None and dataset is not None:
        raise ValueError("give env= (an RL job) or dataset= (an SFT job), not both, or say which with job_type=")
    chosen = (job_type or ("SFT" if dataset is not None else "RL")).upper()
    if chosen == "RL" and env is None:
        raise ValueError("an RL job needs env= (an environment name or reference); for SFT give dataset=")
    if chosen == "SFT" and dataset is None:
        raise ValueError("an SFT job needs dataset= (a JSONL path or a DatasetReference dict)")
    return chosen


class FitCollector:
    """Folds a job's events into a FitResult, calling the user's callbacks on the way."""

    def __init__(self, job_id: str, *, on_metrics: MetricsCallback | None = None,
                 on_event: EventCallback | None = None) -> None:
        self.result = FitResult(job=job_pb2.Job(job_id=job_id))
        self.on_metrics, self.on_event = on_metrics, on_event

    def handle(self, event: job_pb2.JobEvent) -> None:
        kind = event.WhichOneof("payload")
        if kind == "metrics":
            self._metrics(event.metrics)
        elif kind == "checkpoint":
            self.result.checkpoint_ids.append(event.checkpoint.checkpoint_id)
            if event.checkpoint.agent_checkpoint_ids:
                self.result.agent_checkpoint_ids.append(dict(event.checkpoint.agent_checkpoint_ids))
        if self.on_event:
            self.on_event(event)

    def _metrics(self, metrics: job_pb2.MetricsReported) -> None:
        values = dict(metrics.values)
        if metrics.agent_id:
            self.result.agent_history.setdefault(metrics.agent_id, []).append((metrics.step, values))
        else:
            self.result.history.append((metrics.step, values))
        if self.on_metrics:
            self.on_metrics(metrics.step, values)


class ServiceClient:
    def __init__(self, scheduler_url: str = "127.0.0.1:50051", *, api_key: str | None = None) -> None:
        self.scheduler = SchedulerClient(scheduler_url, api_key=api_key)

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def fit(self, *, model: dict, env: str | dict | None = None, dataset: str | dict | None = None,
            job_type: str | None = None, name: str = "", num_steps: int | None = None,
            num_epochs: int | None = None, steps_per_epoch: int = 10, batch_size: int = 8, group_size: int = 8,
            adaptation: dict | None = None, algorithm: dict | None = None, sampling: dict | None = None,
            limits: dict | None = None, training: dict | None = None, asynchronous: dict | None = None,
            on_metrics: MetricsCallback | None = None, on_event: EventCallback | None = None) -> FitResult:
        """Train a policy with RL on `env` or SFT on `dataset`; blocks until the job ends (see
        fit_job_spec for the arguments, FitResult for what comes back)."""
        spec = fit_job_spec(model=model, env=env, dataset=dataset, job_type=job_type, name=name,
                            num_steps=num_steps, num_epochs=num_epochs, steps_per_epoch=steps_per_epoch,
                            batch_size=batch_size, group_size=group_size, adaptation=adaptation,
                            algorithm=algorithm, sampling=sampling, limits=limits, training=training,
                            asynchronous=asynchronous)
        job = self.scheduler.submit_job(spec)
        return self.follow(job.job_id, on_metrics=on_metrics, on_event=on_event)

    def follow(self, job_id: str, *, on_metrics: MetricsCallback | None = None,
               on_event: EventCallback | None = None) -> FitResult:
        """Watch an existing job to its end, collecting metrics and checkpoints."""
        collector = FitCollector(job_id, on_metrics=on_metrics, on_event=on_event)
        collector.result.job = self.scheduler.wait(job_id, on_event=collector.handle)
        return collector.result

    def close(self) -> None:
        self.scheduler.close()
