"""The gateway's use cases: what each Tinker call does, in domain terms (no HTTP, no gRPC here).

`GatewayService` owns the client sessions, the live training runs and samplers, the futures, and
the records in Redis; `http_app` parses requests into these calls and writes their answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from opentinker_runtime.core.channel_pool import ChannelPool
from opentinker_runtime.jobplan.bounds import MAX_LORA_RANK
from opentinker_gateway import fields, sampling, training
from opentinker_gateway.backend import JobBackend
from opentinker_gateway.catalog import CatalogModel
from opentinker_gateway.errors import BadRequest, GatewayError, NotFound
from opentinker_gateway.futures import FutureStore
from opentinker_gateway.records import CheckpointRecord, LoraSettings, Records, RunRecord
from opentinker_gateway.runs import Runs, SamplerHost, SeqTurns, TrainingRun, adaptation
from opentinker_gateway.sessions import ClientSession, ClientSessions
from opentinker_gateway.wire import tinker_public_pb2 as wire

log = structlog.get_logger("opentinker.gateway")
Leaser = Callable[[str, dict], Awaitable[Any]]


@dataclass(frozen=True)
class Caller:
    """Who a request speaks for: the tenant, and the key it sent (SESSION jobs are submitted with it)."""

    tenant_id: str
    key: str


class GatewayService:
    def __init__(self, *, catalog: dict[str, CatalogModel], tokenizer_dirs: dict[str, Path], records: Records,
                 jobs: Any, pool: ChannelPool, futures: FutureStore, sessions: ClientSessions,
                 call_timeout: float) -> None:
        self.catalog = catalog
        self.tokenizer_dirs = tokenizer_dirs
        self.records = records
        self.jobs = jobs
        self.pool = pool
        self.futures = futures
        self.sessions = sessions
        self.call_timeout = call_timeout
        self.runs = Runs()
        self.samplers = sampling.Samplers()
        self.hosts: dict[str, SamplerHost] = {}
        """Each client session's sampler host (rollout-only SESSION job), by session id."""

    # ------------------------------------------------------------ sessions

    def create_session(self, caller: Caller, body: dict) -> ClientSession:
        return self.sessions.create(caller.tenant_id, caller.key, sdk_version=str(body.get("sdk_version", "")),
                                    tags=tuple(str(t) for t in body.get("tags") or ()),
                                    user_metadata=dict(body.get("user_metadata") or {}))

    def heartbeat(self, caller: Caller, session_id: str) -> None:
        self.sessions.heartbeat(caller.tenant_id, session_id)

    async def finish_session(self, caller: Caller, session_id: str) -> None:
        """The client closed its ServiceClient: its runs end (their jobs succeed)."""
        session = self.sessions.finish(caller.tenant_id, session_id)
        await self._end_session(session, "the client closed its session")

    async def _end_session(self, session: ClientSession, message: str) -> None:
        for run in self.runs.of_session(session.session_id):
            await self.close_run(run, message)
        if (host := self.hosts.get(session.session_id)) is not None:
            await self.close_host(host, message)

    async def end_expired_sessions(self) -> None:
        for session in self.sessions.expired():
            log.info("session_expired", session_id=session.session_id, tenant_id=session.tenant_id)
            await self._end_session(session, "the client session ended (no heartbeat)")

    # ------------------------------------------------------------ models

    def base_model(self, name: str) -> CatalogModel:
        model = self.catalog.get(name)
        if model is None:
            raise BadRequest(f"unknown base_model {name!r}; this server offers: {', '.join(sorted(self.catalog))}")
        return model

    def lora_settings(self, body: dict | None) -> LoraSettings:
        body = body or {"rank": 32}
        rank = body.get("rank")
        if not isinstance(rank, int) or isinstance(rank, bool) or not 1 <= rank <= MAX_LORA_RANK:
            raise BadRequest(f"lora_config.rank must be an integer in 1..{MAX_LORA_RANK}, got {rank!r}")
        if not (body.get("train_mlp", True) or body.get("train_attn", True) or body.get("train_unembed", True)):
            raise BadRequest("lora_config: train_mlp, train_attn and train_unembed are all false: nothing would train")
        return LoraSettings(rank=rank, seed=fields.integer(body, "seed", None, low=-2**63, high=2**63 - 1), train_mlp=bool(body.get("train_mlp", True)),
                            train_attn=bool(body.get("train_attn", True)),
                            train_unembed=bool(body.get("train_unembed", True)))

    def check_optimizer(self, config: dict | None) -> None:
        kind = (config or {}).get("type", "adamw")
        if kind != "adamw":
            raise BadRequest(f"optimizer_config type {kind!r} is not supported; only adamw")

    async def create_run(self, caller: Caller, session_id: str, model_seq_id: int, model: CatalogModel,
                         lora: LoraSettings, user_metadata: dict | None) -> TrainingRun:
        session = self.sessions.get(caller.tenant_id, session_id)
        model_id = f"{session.session_id}:train:{model_seq_id}"
        if (existing := self.runs.find(model_id)) is not None and not existing.closed:
            return existing
        spec = self._session_spec(model, lora, model_id)
        placement, _driver = await self.jobs.lease(caller.key, spec)
        backend = JobBackend(self.pool, placement, timeout=self.call_timeout)
        try:
            trainer = await backend.create_session(model.reference(), adaptation(lora), _seed(lora))
        except GatewayError as error:
            await self.jobs.finish(placement.job_id, succeeded=False, message=f"create_model failed: {error.message}")
            raise
        run = TrainingRun(model_id=model_id, tenant_id=caller.tenant_id, tenant_key=caller.key,
                          client_session=session.session_id, base_model=model, lora=lora, backend=backend,
                          trainer_session=trainer.session_id, turns=SeqTurns())
        self.runs.add(run)
        await self.records.save_run(caller.tenant_id, RunRecord(
            model_id=model_id, base_model=model.name, lora=lora, job_id=placement.job_id,
            user_metadata={str(k): str(v) for k, v in (user_metadata or {}).items()}))
        log.info("run_created", model_id=model_id, job_id=placement.job_id, base_model=model.name, rank=lora.rank)
        return run

    def _session_spec(self, model: CatalogModel, lora: LoraSettings, model_id: str) -> dict:
        return {"type": "JOB_TYPE_SESSION", "display_name": f"tinker {model.name} (LoRA rank {lora.rank})",
                "policy": {"model": model.reference(), "adaptation": adaptation(lora)},
                "labels": {"tinker/model_id": model_id[:256]}}

    async def close_run(self, run: TrainingRun, message: str, *, succeeded: bool = True) -> None:
        if run.closed:
            return
        run.closed = True
        self.samplers.drop_run(run)
        await _quietly(run.backend.close_session(run.trainer_session))
        for policy_id in set(run.sampler_policies.values()):
            await _quietly(run.backend.unload_policy(policy_id))
        await self.jobs.finish(run.job_id, succeeded=succeeded, message=message)
        self.runs.remove(run)
        log.info("run_closed", model_id=run.model_id, job_id=run.job_id, reason=message)

    async def job_stopped(self, job_id: str) -> None:
        """The Scheduler stopped the job (the tenant cancelled it): the run ends, its job is over."""
        for host in [h for h in self.hosts.values() if h.job_id == job_id]:
            host.closed = True
            self.samplers.drop_run(host)
            self.hosts.pop(host.client_session, None)
        run = self.runs.of_job(job_id)
        if run is not None:
            run.closed = True
            self.samplers.drop_run(run)
            await _quietly(run.backend.close_session(run.trainer_session))
            self.runs.remove(run)

    def info(self, caller: Caller, model_id: str) -> dict:
        run = self.runs.get(caller.tenant_id, model_id)
        model = run.base_model
        tokenizer = self.tokenizer_dirs.get(model.name)
        return {"type": "get_info", "model_id": run.model_id, "is_lora": True, "lora_rank": run.lora.rank,
                "model_name": model.name,
                "model_data": {"arch": model.arch, "model_name": model.name,
                               "tokenizer_id": str(tokenizer) if tokenizer else model.name}}

    # ------------------------------------------------------------ training calls

    def submit_ordered(self, caller: Caller, run: TrainingRun, kind: str, seq_id: int | None,
                       work: Callable[[str], Awaitable[Any]]) -> str:
        """A future that runs `work(request_id)` in the run's seq_id turn (deduplicated by seq_id)."""
        run.touch()

        async def in_turn() -> Any:
            async with run.turns.turn(seq_id):
                if run.closed:
                    raise NotFound(f"training run {run.model_id} has ended")
                return await work(f"{run.model_id}/{seq_id}")

        return self.futures.submit(caller.tenant_id, kind, in_turn(),
                                   dedupe_key=f"{run.model_id}/{seq_id}" if seq_id else "")

    async def skip_turn(self, caller: Caller, model_id: object, seq_id: object) -> None:
        """A refused call of the caller's live run still counts its seq_id as done."""
        if isinstance(model_id, str) and isinstance(seq_id, int) and not isinstance(seq_id, bool):
            run = self.runs.find(model_id)
            if run is not None and run.tenant_id == caller.tenant_id:
                await run.turns.finish(seq_id)

    async def refused(self, run: TrainingRun, seq_id: int | None, check: Callable[[], Any]) -> Any:
        """`check()`; when it refuses the request (a 400 now, not in the future), the request's
        seq_id still counts as done so the calls after it run."""
        try:
            return check()
        except BaseException:
            await run.turns.finish(seq_id)
            raise

    async def forward_backward(self, caller: Caller, request: wire.ForwardBackwardRequest) -> str:
        run = self.runs.get(caller.tenant_id, request.model_id)
        prepared = await self.refused(run, request.seq_id, lambda: training.prepare(request))
        kind = "Forward" if request.forward_only else "ForwardBackward"
        return self.submit_ordered(caller, run, kind, request.seq_id,
                                   lambda rid: training.forward_backward(run, request, prepared, rid))

    async def optim_step(self, caller: Caller, body: dict) -> str:
        run = self.runs.get(caller.tenant_id, str(body.get("model_id", "")))
        adam = await self.refused(run, body.get("seq_id"), lambda: training.adam_params(body))
        return self.submit_ordered(caller, run, "OptimStep", body.get("seq_id"),
                                   lambda rid: training.optim_step(run, adam, rid))

    async def save_weights(self, caller: Caller, body: dict) -> str:
        run = self.runs.get(caller.tenant_id, str(body.get("model_id", "")))
        name = await self.refused(run, body.get("seq_id"), lambda: _checked_name(body, f"step-{run.step:06d}"))

        async def work(rid: str) -> dict:
            record = await training.save_checkpoint(run, self.records, kind="training", name=name,
                                                    overwrite=bool(body.get("overwrite")),
                                                    ttl_seconds=body.get("ttl_seconds"),
                                                    user_metadata=body.get("user_metadata"), request_id=rid)
            return {"type": "save_weights", "path": record.tinker_path}

        return self.submit_ordered(caller, run, "SaveWeights", body.get("seq_id"), work)

    async def load_weights(self, caller: Caller, body: dict) -> str:
        path, with_optimizer = str(body.get("path", "")), bool(body.get("optimizer"))
        if body.get("session_id"):
            return self._create_via_load(caller, body, path, with_optimizer)
        run = self.runs.get(caller.tenant_id, str(body.get("model_id", "")))

        async def work(rid: str) -> dict:
            await self._load_into(run, caller, path, with_optimizer)
            return {"type": "load_weights", "path": path}

        return self.submit_ordered(caller, run, "LoadWeights", body.get("seq_id"), work)

    def _create_via_load(self, caller: Caller, body: dict, path: str, with_optimizer: bool) -> str:
        session_id, model_seq_id = fields.text(body, "session_id"), fields.integer(body, "model_seq_id", 0)
        self.sessions.get(caller.tenant_id, session_id)

        async def work() -> dict:
            record = await training.resolve_checkpoint(self.records, caller.tenant_id, path)
            model = self.base_model(body.get("base_model") or record.base_model)
            run = await self.create_run(caller, session_id, model_seq_id, model, record.lora, body.get("user_metadata"))
            await self._load_into(run, caller, path, with_optimizer)
            return {"type": "load_weights", "path": path}

        return self.futures.submit(caller.tenant_id, "LoadWeights", work(),
                                   dedupe_key=f"{session_id}:train:{model_seq_id}/load")

    async def _load_into(self, run: TrainingRun, caller: Caller, path: str, with_optimizer: bool) -> None:
        record = await training.resolve_checkpoint(self.records, caller.tenant_id, path)
        if record.base_model != run.base_model.name or record.lora.rank != run.lora.rank:
            raise BadRequest(f"{path} is a {record.base_model} LoRA rank {record.lora.rank} checkpoint; this model is "
                             f"{run.base_model.name} rank {run.lora.rank}")
        session = await run.backend.load_checkpoint(run.trainer_session, record.checkpoint_id,
                                                    keep_optimizer=with_optimizer)
        run.step, run.policy_version = int(session.step), int(session.policy_version)

    async def save_for_sampler(self, caller: Caller, body: dict) -> str:
        run = self.runs.get(caller.tenant_id, str(body.get("model_id", "")))
        named = body.get("path") is not None
        name = await self.refused(run, body.get("seq_id"), lambda: _checked_name(body, "ephemeral") if named else "")

        async def work(rid: str) -> dict:
            policy = await self._snapshot_policy(run)
            if not named:
                sampler = self.samplers.add(caller.tenant_id, run, policy, None, run.base_model.name)
                run.sampler_policies[sampler.sampler_id] = policy
                await self._evict_snapshots(run)
                return {"type": "save_weights_for_sampler", "sampling_session_id": sampler.sampler_id}
            record = await training.save_checkpoint(run, self.records, kind="sampler", name=name,
                                                    overwrite=bool(body.get("overwrite", True)),
                                                    ttl_seconds=body.get("ttl_seconds"),
                                                    user_metadata=body.get("user_metadata"), request_id=rid)
            run.sampler_policies[record.tinker_path] = policy
            return {"type": "save_weights_for_sampler", "path": record.tinker_path}

        return self.submit_ordered(caller, run, "SaveWeightsForSampler", body.get("seq_id"), work)

    async def _snapshot_policy(self, run: TrainingRun) -> str:
        policy = await run.backend.load_policy(run.base_model.reference(), adaptation(run.lora))
        if run.policy_version > 0:  # before any step the adapter is the fresh one the Rollout built
            await run.backend.push_weights(policy.policy_id, run.trainer_session)
        return policy.policy_id

    async def _evict_snapshots(self, run: TrainingRun) -> None:
        ephemeral = [key for key in run.sampler_policies if not key.startswith("tinker://")]
        for key in ephemeral[:-sampling.MAX_SNAPSHOTS_PER_RUN]:
            policy = run.sampler_policies.pop(key)
            if policy not in run.sampler_policies.values():
                await _quietly(run.backend.unload_policy(policy))

    # ------------------------------------------------------------ sampling

    async def create_sampling_session(self, caller: Caller, body: dict) -> str:
        """A sampler of a saved sampler/training checkpoint (on its run's Rollout lease while the run
        lives, else on the client session's own rollout-only SESSION job) or of a base model."""
        session = self.sessions.get(caller.tenant_id, str(body.get("session_id", "")))
        path, base = body.get("model_path"), body.get("base_model")
        if path:
            record = await training.resolve_checkpoint(self.records, caller.tenant_id, path)
            run = self.runs.find(record.model_id)
            if run is not None and not run.closed and run.tenant_id == caller.tenant_id:
                policy = run.sampler_policies.get(path) or await self._checkpoint_policy(run, path, record)
                return self.samplers.add(caller.tenant_id, run, policy, path, record.base_model).sampler_id
            host = await self._sampler_host(caller, session, self.base_model(record.base_model))
            policy = host.sampler_policies.get(path) or await self._checkpoint_policy(host, path, record)
            return self.samplers.add(caller.tenant_id, host, policy, path, record.base_model).sampler_id
        if not base:
            raise BadRequest("create_sampling_session needs model_path or base_model")
        model = self.base_model(base)
        host = await self._sampler_host(caller, session, model)
        key = f"base:{model.name}"
        if key not in host.sampler_policies:
            host.sampler_policies[key] = (await host.backend.load_policy(model.reference(), {"full": {}})).policy_id
        return self.samplers.add(caller.tenant_id, host, host.sampler_policies[key], None, model.name).sampler_id

    async def _sampler_host(self, caller: Caller, session: ClientSession, model: CatalogModel) -> SamplerHost:
        host = self.hosts.get(session.session_id)
        if host is not None and not host.closed:
            return host
        spec = {"type": "JOB_TYPE_SESSION", "display_name": "tinker samplers",
                "policy": {"model": model.reference(), "adaptation": {"full": {}}},
                "labels": {"tinker/samplers_of": session.session_id[:256]}}
        placement, _driver = await self.jobs.lease(session.tenant_key, spec)
        host = SamplerHost(tenant_id=caller.tenant_id, client_session=session.session_id,
                           backend=JobBackend(self.pool, placement, timeout=self.call_timeout))
        self.hosts[session.session_id] = host
        return host

    async def _checkpoint_policy(self, host: TrainingRun | SamplerHost, path: str, record: CheckpointRecord) -> str:
        """The checkpoint's adapter as a policy of `host`'s Rollout, the way a live run's snapshot is
        made (a Trainer session restores it and streams it over): exact, where merging the adapter
        into the base would also change embeddings tied to an adapted lm_head."""
        model = self.base_model(record.base_model)
        trainer = await host.backend.create_session(model.reference(), adaptation(record.lora), 0)
        try:
            await host.backend.load_checkpoint(trainer.session_id, record.checkpoint_id, keep_optimizer=False)
            policy = await host.backend.load_policy(model.reference(), adaptation(record.lora))
            await host.backend.push_weights(policy.policy_id, trainer.session_id)
        finally:
            await _quietly(host.backend.close_session(trainer.session_id))
        host.sampler_policies[path] = policy.policy_id
        return policy.policy_id

    async def close_host(self, host: SamplerHost, message: str) -> None:
        if host.closed:
            return
        host.closed = True
        self.samplers.drop_run(host)
        for policy_id in set(host.sampler_policies.values()):
            await _quietly(host.backend.unload_policy(policy_id))
        await self.jobs.finish(host.job_id, succeeded=True, message=message)
        self.hosts.pop(host.client_session, None)

    def sample(self, caller: Caller, body: dict) -> tuple[str, list[str]]:
        sampler = self.samplers.get(caller.tenant_id, str(body.get("sampling_session_id", "")))
        if body.get("topk_prompt_logprobs") or body.get("topk_sample_logprobs") or body.get("prompt_alt_tokens_k") \
                or body.get("target_prompt_logprobs") is not None or body.get("prompt_logprobs_last_n") is not None:
            raise BadRequest("top-k logprobs, target_prompt_logprobs, prompt_alt_tokens and prompt_logprobs_last_n "
                             "are not supported here")
        num_samples = fields.integer(body, "num_samples", 1, low=1, high=sampling.MAX_SAMPLES)
        params = sampling.sampling_params(fields.mapping(body, "sampling_params") or {}, num_samples)
        prompt = _prompt_tokens(body.get("prompt") or {})
        with_prompt_logprobs = bool(body.get("prompt_logprobs"))

        async def work() -> bytes:
            result = await sampler.run.backend.sample(sampler.policy_id, prompt, params, with_prompt_logprobs)
            return sampling.sample_response(result, with_prompt_logprobs)

        seq_id = body.get("seq_id")
        request_id = self.futures.submit(caller.tenant_id, "Sample", work(),
                                         dedupe_key=f"{sampler.sampler_id}/{seq_id}" if seq_id is not None else "")
        return request_id, [f"{request_id}-{i}" for i in range(num_samples)]

    def sampler_info(self, caller: Caller, sampler_id: str) -> dict:
        sampler = self.samplers.get(caller.tenant_id, sampler_id)
        return {"sampler_id": sampler.sampler_id, "base_model": sampler.base_model, "model_path": sampler.model_path}


def _checked_name(body: dict, fallback: str) -> str:
    training.expiry(body.get("ttl_seconds"))
    return training.checkpoint_name(body.get("path"), fallback)


def _prompt_tokens(prompt: dict) -> list[int]:
    tokens: list[int] = []
    for index, chunk in enumerate(prompt.get("chunks") or ()):
        if chunk.get("type", "encoded_text") != "encoded_text":
            raise BadRequest(f"prompt.chunks[{index}]: only encoded_text chunks are supported")
        values = chunk.get("tokens") or []
        if not all(isinstance(t, int) and t >= 0 for t in values):
            raise BadRequest(f"prompt.chunks[{index}].tokens must be non-negative token ids")
        tokens.extend(values)
    if not tokens:
        raise BadRequest("prompt is empty")
    return tokens


def _seed(lora: LoraSettings) -> int:
    return lora.seed if lora.seed is not None else 0


async def _quietly(call: Awaitable[Any]) -> None:
    try:
        await call
    except GatewayError as error:
        log.warning("cleanup_failed", error=error.message)
