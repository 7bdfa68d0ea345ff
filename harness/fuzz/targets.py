"""A live stack as a fuzzing target: fixtures, one valid example per RPC, checks after a batch.

`LiveTarget.setup()` creates, through the real RPCs, what valid requests need to reach deep
validation: a tenant and keys, a queued job, a fake worker; a Trainer session with a
checkpoint and its exported weights; a Rollout policy of the same model and adapter; an
EnvHost session; a Coordinator match and run. Destructive RPCs (CloseSession, UnloadModel,
LeaveMatch, RevokeApiKey, DeregisterWorker) aim at their own victims, and the known-good
requests of `health_problems` use probes nothing else touches, so a fuzzed call cannot make a
later check fail for a legitimate reason.

Side effects stay bounded: jobs ask for a CUDA device the stack does not have (they queue
and never run) and `after_batch` cancels every job SubmitJob left unfinished.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf import duration_pb2
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc

from opentinker_api.common.v1 import algorithm_pb2 as algo
from opentinker_api.common.v1 import datum_pb2, environment_pb2, model_pb2, progress_pb2, resources_pb2
from opentinker_api.common.v1 import sampling_pb2, weights_pb2
from opentinker_api.coordinator.v1 import coordinator_service_pb2 as co
from opentinker_api.coordinator.v1 import coordinator_service_pb2_grpc as co_grpc
from opentinker_api.envhost.v1 import envhost_service_pb2 as env
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as env_grpc
from opentinker_api.rollout.v1 import rollout_service_pb2 as ro
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as ro_grpc
from opentinker_api.scheduler.v1 import job_pb2, tenant_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as sc
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as sc_grpc
from opentinker_api.trainer.v1 import trainer_service_pb2 as tr
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as tr_grpc
from harness.fuzz.rpcs import SERVICES, Request, Rpc

MODEL = model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name="tiny-llama", seed=1))
LORA = model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(rank=4, alpha=8.0))
TERMINAL = (job_pb2.Job.STATE_SUCCEEDED, job_pb2.Job.STATE_FAILED, job_pb2.Job.STATE_CANCELLED)
FIXTURE_DEADLINE_S = 60.0
STUBS = {"scheduler": sc_grpc.SchedulerServiceStub, "trainer": tr_grpc.TrainerServiceStub,
         "rollout": ro_grpc.RolloutServiceStub, "envhost": env_grpc.EnvHostServiceStub,
         "coordinator": co_grpc.CoordinatorServiceStub}


MAX_FENCING_TOKEN = 2**63 - 1
"""The fixtures' token: a mutated lease can only be stale, never raise the job's highest token
and make every later call of the batch stale before its deeper validation."""


def lease(job_id: str, token: int = MAX_FENCING_TOKEN) -> resources_pb2.LeaseContext:
    return resources_pb2.LeaseContext(job_id=job_id, lease_id=f"{job_id}-lease", fencing_token=token)


def queued_rl_spec() -> job_pb2.JobSpec:
    """A valid RL job that waits forever: it asks for a CUDA trainer the CPU stack lacks."""
    spec = job_pb2.JobSpec(
        type=job_pb2.JOB_TYPE_RL, display_name="fuzz",
        policy=job_pb2.AgentSpec(model=MODEL, adaptation=LORA, algorithm=algo.Algorithm(
            optimizer=algo.OptimizerConfig(learning_rate=1e-3),
            loss=algo.LossConfig(function=algo.LOSS_FUNCTION_PPO_CLIP, clip_low=0.2, clip_high=0.28)),
            sampling=sampling_pb2.SamplingParams(max_new_tokens=4, temperature=1.0)),
        environment=environment_pb2.EnvironmentReference(env_name="math"),
        training=job_pb2.TrainingConfig(total_steps=1, batch_size=1, group_size=2, seed=1,
                                        max_duration=duration_pb2.Duration(seconds=60)),
        resources=[resources_pb2.ResourceRequest(role=resources_pb2.ROLE_TRAINER, device_count=1,
                                                 device_kind=resources_pb2.DEVICE_KIND_CUDA)],
        labels={"suite": "fuzz"})
    spec.environment.config.update({"seed": 1, "eval_size": 2})
    return spec


def datum() -> datum_pb2.Datum:
    return datum_pb2.Datum(tokens=[1, 2, 3, 4], loss_mask=[0, 1, 1, 1], advantages=[0, 1, 1, 1],
                           sampling_logprobs=[0, -1, -1, -1], group_id="g")


class LiveTarget:
    """The five services of one stack (`addresses`, `pids` by service name), called with `api_key`."""

    tenant_key = False

    def __init__(self, addresses: dict[str, str], api_key: str, pids: dict[str, int]) -> None:
        self.addresses, self.pids = addresses, pids
        self.metadata = (("authorization", f"Bearer {api_key}"),)
        self.channels = {name: grpc.insecure_channel(address) for name, address in addresses.items()}
        self.ids: dict[str, str] = {}
        self.tag = uuid.uuid4().hex[:6]
        """Suffix of the fixtures' job ids: a stack fuzzed before has seen their fencing tokens."""
        self.weights: list[ro.UpdateWeightsRequest] = []

    def job(self, name: str) -> str:
        return f"{name}-{self.tag}"

    def channel(self, service: str) -> grpc.Channel:
        return self.channels[service]

    def call(self, service: str, method: str, request: Message) -> Any:
        """A unary call through the generated stub that must succeed (fixtures, known-good probes)."""
        stub = STUBS[service](self.channels[service])
        return getattr(stub, method)(request, timeout=FIXTURE_DEADLINE_S, metadata=self.metadata)

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()

    # -- fixtures ---------------------------------------------------------------------------

    def setup(self) -> None:
        self._scheduler_fixtures()
        self._trainer_fixtures()
        self._rollout_fixtures()
        self._envhost_fixtures()
        self._coordinator_fixtures()

    def _scheduler_fixtures(self) -> None:
        try:
            self.call("scheduler", "CreateTenant", sc.CreateTenantRequest(
                tenant_id="fuzz-tenant", display_name="fuzz", quota=tenant_pb2.Quota(max_queued_jobs=1000)))
        except grpc.RpcError as error:  # a stack fuzzed before (bench --scheduler on a reused stack)
            if error.code() is not grpc.StatusCode.FAILED_PRECONDITION:
                raise
        victim = self.call("scheduler", "CreateApiKey", sc.CreateApiKeyRequest(tenant_id="fuzz-tenant"))
        self.ids["victim_key"] = victim.api_key.key_id
        self.ids["job"] = self.call("scheduler", "SubmitJob", sc.SubmitJobRequest(spec=queued_rl_spec())).job.job_id
        for worker_id in ("fuzz-worker", "fuzz-worker-victim"):
            self.call("scheduler", "RegisterWorker", self._fake_worker(worker_id))

    @staticmethod
    def _fake_worker(worker_id: str) -> sc.RegisterWorkerRequest:
        """An EnvHost worker at an address nobody listens on (EnvHosts get no leases)."""
        return sc.RegisterWorkerRequest(worker_id=worker_id, role=resources_pb2.ROLE_ENVHOST,
                                        address="127.0.0.1:9", labels={"suite": "fuzz"}, version="fuzz")

    def _session(self, job_id: str) -> str:
        request = tr.CreateSessionRequest(lease=lease(job_id), base_model=MODEL, adaptation=LORA, seed=1,
                                          optimizer=algo.OptimizerConfig(learning_rate=1e-3))
        return self.call("trainer", "CreateSession", request).session.session_id

    def _trainer_fixtures(self) -> None:
        self.ids["probe_session"] = self._session(self.job("fuzz-probe"))
        self.ids["session"] = self._session(self.job("fuzz-train"))
        self.ids["victim_session"] = self._session(self.job("fuzz-train-victim"))
        saved = self.call("trainer", "SaveCheckpoint", tr.SaveCheckpointRequest(
            session_id=self.ids["session"], lease=lease(self.job("fuzz-train")), name="fuzz-base"))
        self.ids["checkpoint"] = saved.checkpoint.checkpoint_id
        export = STUBS["trainer"](self.channels["trainer"]).ExportWeights(
            tr.ExportWeightsRequest(session_id=self.ids["session"], chunk_bytes=1 << 16),
            timeout=FIXTURE_DEADLINE_S, metadata=self.metadata)
        self.exported = list(export)

    def _policy(self, job_id: str) -> str:
        request = ro.LoadModelRequest(lease=lease(job_id), model=MODEL, adaptation=LORA,
                                      engine=ro.ENGINE_TRANSFORMERS, max_batch_size=4)
        return self.call("rollout", "LoadModel", request).policy.policy_id

    def _rollout_fixtures(self) -> None:
        self.ids["probe_policy"] = self._policy(self.job("fuzz-probe"))
        self.ids["policy"] = self._policy(self.job("fuzz-roll"))
        self.ids["victim_policy"] = self._policy(self.job("fuzz-roll-victim"))
        target = ro.UpdateWeightsTarget(policy_id=self.ids["policy"], lease=lease(self.job("fuzz-roll")))
        header = self.exported[0].header
        header.policy_version = max(header.policy_version, 1)
        self.weights = [ro.UpdateWeightsRequest(target=target), ro.UpdateWeightsRequest(header=header),
                        *(ro.UpdateWeightsRequest(chunk=item.chunk) for item in self.exported[1:])]

    def _envhost_session(self) -> str:
        opened = self.call("envhost", "OpenSession", env.OpenSessionRequest(env_name="math", job_id="fuzz"))
        self.call("envhost", "Reset", env.ResetRequest(session_id=opened.session_id, seed=3))
        return opened.session_id

    def _envhost_fixtures(self) -> None:
        self.ids["env_session"] = self._envhost_session()
        self.ids["victim_env_session"] = self._envhost_session()

    def _match(self, job_id: str) -> str:
        request = co.OpenMatchRequest(job_id=job_id, seed=1, environment=environment_pb2.EnvironmentReference(
            env_name="gomoku", envhost_address=self.addresses["envhost"]))
        return self.call("coordinator", "OpenMatch", request).match.match_id

    def _coordinator_fixtures(self) -> None:
        self.ids["probe_match"] = self._match(self.job("fuzz-coord-probe"))
        self.ids["match"] = self._match(self.job("fuzz-coord"))
        self.ids["victim_match"] = self._match(self.job("fuzz-coord"))
        self.call("coordinator", "JoinMatch", co.JoinMatchRequest(match_id=self.ids["victim_match"],
                  agent_id="a1", seat="black"))
        self.call("coordinator", "StartRun", co.StartRunRequest(lease=lease(self.job("fuzz-run"))))

    # -- valid examples ---------------------------------------------------------------------

    def examples(self, rpc: Rpc) -> list[Request]:
        """Valid requests for `rpc` (several when one would hide a branch); [] if none."""
        return getattr(self, f"_examples_{rpc.service}")().get(rpc.method.name, [])

    def _examples_scheduler(self) -> dict[str, list[Request]]:
        ids, spec, job_lease = self.ids, queued_rl_spec(), lease(self.ids["job"])
        metrics = job_pb2.JobEvent(metrics=job_pb2.MetricsReported(step=1, values={"loss": 1.0}))
        samples = job_pb2.JobEvent(samples=job_pb2.SamplesReported(step=1, split="train", samples=[
            job_pb2.EpisodeSample(group_id="g", prompt="2+2=", reward=1.0, stop_reason=1, correct=True,
                                  turns=[job_pb2.SampleTurn(action="4", observation="right", reward=1.0)])]))
        quota = tenant_pb2.Quota(max_devices=4, max_concurrent_jobs=2, max_queued_jobs=1000)
        return {
            "SubmitJob": [sc.SubmitJobRequest(spec=spec, validate_only=True), sc.SubmitJobRequest(spec=spec)],
            "GetJob": [sc.GetJobRequest(job_id=ids["job"])],
            "ListJobs": [sc.ListJobsRequest(page_size=5, states=[job_pb2.Job.STATE_QUEUED],
                                            type=job_pb2.JOB_TYPE_RL)],
            "CancelJob": [sc.CancelJobRequest(job_id=ids["job"], reason="fuzz")],
            "WatchJob": [sc.WatchJobRequest(job_id=ids["job"])],
            "ListJobSamples": [sc.ListJobSamplesRequest(job_id=ids["job"], step=1, split="train", page_size=5)],
            "ListArtifacts": [sc.ListArtifactsRequest(job_id=ids["job"])],
            "DownloadArtifact": [sc.DownloadArtifactRequest(artifact_id=ids["job"] + "-final", path_prefix="adapter")],
            "RegisterWorker": [self._fake_worker("fuzz-worker")],
            "Heartbeat": [sc.HeartbeatRequest(worker_id="fuzz-worker", load={"gpu_memory_used_bytes": 1.0})],
            "DeregisterWorker": [sc.DeregisterWorkerRequest(worker_id="fuzz-worker-victim", drain=True)],
            "ListWorkers": [sc.ListWorkersRequest(page_size=5, role=resources_pb2.ROLE_TRAINER)],
            "CheckJobToken": [sc.CheckJobTokenRequest(job_id=ids["job"], job_token="otj_" + "x" * 43)],
            "ReportJobEvents": [sc.ReportJobEventsRequest(lease=job_lease, events=[metrics], request_id="r"),
                                sc.ReportJobEventsRequest(lease=job_lease, events=[samples], request_id="s")],
            "FinishJob": [sc.FinishJobRequest(lease=job_lease, final_state=job_pb2.Job.STATE_FAILED, message="m")],
            "CreateTenant": [sc.CreateTenantRequest(tenant_id="fuzz-other", display_name="x", quota=quota)],
            "GetTenant": [sc.GetTenantRequest(tenant_id="fuzz-tenant")],
            "ListTenants": [sc.ListTenantsRequest(page_size=5)],
            "UpdateTenantQuota": [sc.UpdateTenantQuotaRequest(tenant_id="fuzz-tenant", quota=quota)],
            "CreateApiKey": [sc.CreateApiKeyRequest(tenant_id="fuzz-tenant", description="fuzz")],
            "ListApiKeys": [sc.ListApiKeysRequest(tenant_id="fuzz-tenant", page_size=5)],
            "RevokeApiKey": [sc.RevokeApiKeyRequest(key_id=ids["victim_key"])],
        }

    def _examples_trainer(self) -> dict[str, list[Request]]:
        session, train = self.ids["session"], lease(self.job("fuzz-train"))
        loss = algo.LossConfig(function=algo.LOSS_FUNCTION_PPO_CLIP, clip_low=0.2, clip_high=0.28)
        create = tr.CreateSessionRequest(lease=lease(self.job("fuzz-train-new")), base_model=MODEL, adaptation=LORA,
                                         seed=1, optimizer=algo.OptimizerConfig(learning_rate=1e-3, max_grad_norm=1.0))
        return {
            "CreateSession": [create],
            "GetSession": [tr.GetSessionRequest(session_id=session)],
            "ForwardBackward": [tr.ForwardBackwardRequest(session_id=session, lease=train, datums=[datum()],
                                                          loss=loss)],
            "OptimStep": [tr.OptimStepRequest(session_id=session, lease=train, learning_rate=1e-4)],
            "ComputeLogprobs": [tr.ComputeLogprobsRequest(session_id=session, temperature=1.0,
                                                          sequences=[datum_pb2.TokenSequence(tokens=[1, 2, 3])])],
            "SaveCheckpoint": [tr.SaveCheckpointRequest(session_id=session, lease=train, name="fuzz",
                                                        data_cursor=b"c")],
            "LoadCheckpoint": [tr.LoadCheckpointRequest(session_id=session, lease=train,
                                                        checkpoint_id=self.ids["checkpoint"])],
            "ExportWeights": [tr.ExportWeightsRequest(session_id=session,
                                                      format=weights_pb2.WEIGHTS_FORMAT_LORA_ADAPTER,
                                                      chunk_bytes=1 << 16)],
            "CloseSession": [tr.CloseSessionRequest(session_id=self.ids["victim_session"],
                                                    lease=lease(self.job("fuzz-train-victim")))],
        }

    def _examples_rollout(self) -> dict[str, list[Request]]:
        policy, roll = self.ids["policy"], lease(self.job("fuzz-roll"))
        sampling = sampling_pb2.SamplingParams(max_new_tokens=4, temperature=1.0, top_p=1.0, n=1, seed=1)
        episodes = ro.RunEpisodesRequest(
            policy_id=policy, lease=roll, environment=environment_pb2.EnvironmentReference(env_name="math"),
            episodes=[ro.EpisodeSpec(group_id="g", seed=1)], group_size=1, sampling=sampling,
            limits=sampling_pb2.AgentLoopLimits(max_turns=2))
        prompt = ro.Prompt(tokens=datum_pb2.TokenSequence(tokens=[1, 2, 3]))
        chat = ro.Prompt(messages=ro.ChatMessages(messages=[ro.ChatMessage(role="user", content="1+1=")]))
        return {
            "LoadModel": [ro.LoadModelRequest(lease=lease(self.job("fuzz-roll-new")), model=MODEL, adaptation=LORA,
                                              max_batch_size=4)],
            "UnloadModel": [ro.UnloadModelRequest(policy_id=self.ids["victim_policy"],
                                                  lease=lease(self.job("fuzz-roll-victim")))],
            "UpdateWeights": [list(self.weights)],
            "Sample": [ro.SampleRequest(policy_id=policy, prompts=[prompt, chat], sampling=sampling)],
            "RunEpisodes": [episodes],
        }

    def _examples_envhost(self) -> dict[str, list[Request]]:
        session = self.ids["env_session"]
        open_math = env.OpenSessionRequest(env_name="math", job_id="fuzz")
        open_math.config.update({"seed": 2, "eval_size": 2})
        return {
            "ListEnvironments": [env.ListEnvironmentsRequest(page_size=2)],
            "OpenSession": [open_math],
            "Reset": [env.ResetRequest(session_id=session, seed=4)],
            "Step": [env.StepRequest(session_id=session, action="42")],
            "CloseSession": [env.CloseSessionRequest(session_id=self.ids["victim_env_session"])],
            "Interact": [[env.InteractRequest(sequence=1, open_session=open_math),
                          env.InteractRequest(sequence=2, reset=env.ResetRequest(session_id=session, seed=5)),
                          env.InteractRequest(sequence=3, step=env.StepRequest(session_id=session, action="7"))]],
        }

    def _examples_coordinator(self) -> dict[str, list[Request]]:
        match = self.ids["match"]
        gomoku = environment_pb2.EnvironmentReference(env_name="gomoku", envhost_address=self.addresses["envhost"])
        return {
            "StartRun": [co.StartRunRequest(lease=lease(self.job("fuzz-run-new")))],
            "ResumeRun": [co.ResumeRunRequest(lease=lease(self.job("fuzz-run")))],
            "StopRun": [co.StopRunRequest(lease=lease(self.job("fuzz-run")), reason="fuzz")],
            "GetRun": [co.GetRunRequest(job_id=self.job("fuzz-run"))],
            "WatchRun": [co.WatchRunRequest(job_id=self.job("fuzz-run"))],
            "OpenMatch": [co.OpenMatchRequest(job_id=self.job("fuzz-coord"), environment=gomoku,
                                              seats=["black", "white"], seed=2)],
            "JoinMatch": [co.JoinMatchRequest(match_id=match, agent_id="a1", seat="black")],
            "GetMatch": [co.GetMatchRequest(match_id=match)],
            "AwaitTurn": [co.AwaitTurnRequest(match_id=match, agent_id="a1")],
            "SubmitAction": [co.SubmitActionRequest(match_id=match, agent_id="a1", turn_index=0, action="e5")],
            "LeaveMatch": [co.LeaveMatchRequest(match_id=self.ids["victim_match"], agent_id="a1")],
            "ArriveAtBarrier": [co.ArriveAtBarrierRequest(job_id=self.job("fuzz-coord"), agent_id="a1",
                                                          phase=progress_pb2.PHASE_ROLLOUT, step=1)],
        }

    # -- after a batch ----------------------------------------------------------------------

    def after_batch(self, rpc: Rpc) -> None:
        if rpc.name == "SchedulerService.SubmitJob":
            self.cancel_unfinished_jobs()

    def cancel_unfinished_jobs(self) -> int:
        """Cancel every job not yet ended (fuzzed submissions); returns how many."""
        cancelled, token = 0, ""
        while True:
            page = self.call("scheduler", "ListJobs", sc.ListJobsRequest(page_size=1000, page_token=token))
            for job in page.jobs:
                if job.state not in TERMINAL and not job.cancel_requested:
                    self.call("scheduler", "CancelJob", sc.CancelJobRequest(job_id=job.job_id, reason="fuzz"))
                    cancelled += 1
            token = page.next_page_token
            if not token:
                return cancelled

    def health_problems(self, service: str) -> list[str]:
        """grpc.health.v1 SERVING, a known-good request succeeds, the process is alive."""
        problems = []
        if not _alive(self.pids[service]):
            return [f"{service}: process {self.pids[service]} is gone"]
        try:
            status = health_pb2_grpc.HealthStub(self.channels[service]).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=10)
            if status.status != health_pb2.HealthCheckResponse.SERVING:
                name = health_pb2.HealthCheckResponse.ServingStatus.Name(status.status)
                problems.append(f"{service}: health {name}")
            self._known_good(service)
        except grpc.RpcError as error:
            problems.append(f"{service}: {error.code().name} {error.details()}")
        return problems

    def _known_good(self, service: str) -> None:
        ids = self.ids
        if service == "scheduler":
            self.call(service, "GetJob", sc.GetJobRequest(job_id=ids["job"]))
        elif service == "trainer":
            self.call(service, "ComputeLogprobs", tr.ComputeLogprobsRequest(
                session_id=ids["probe_session"], sequences=[datum_pb2.TokenSequence(tokens=[1, 2, 3])]))
        elif service == "rollout":
            prompt = ro.Prompt(tokens=datum_pb2.TokenSequence(tokens=[1, 2, 3]))
            self.call(service, "Sample", ro.SampleRequest(policy_id=ids["probe_policy"], prompts=[prompt],
                      sampling=sampling_pb2.SamplingParams(max_new_tokens=2)))
        elif service == "envhost":
            session = self._envhost_session()
            self.call(service, "CloseSession", env.CloseSessionRequest(session_id=session))
        else:
            self.call(service, "GetMatch", co.GetMatchRequest(match_id=ids["probe_match"]))

    def all_health_problems(self) -> list[str]:
        return [problem for service in SERVICES for problem in self.health_problems(service)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def pids_of(status: dict) -> dict[str, int]:
    """{service: pid} from `opentinker up --json` output."""
    return {p["name"]: p["pid"] for p in status["processes"] if p["name"] in SERVICES}


def rpcs_in_order(rpcs: Sequence[Rpc]) -> list[Rpc]:
    """Destructive RPCs last within their service, so the others fuzz against live fixtures."""
    last = {"CloseSession", "UnloadModel", "LeaveMatch", "RevokeApiKey", "DeregisterWorker", "CancelJob",
            "StopRun", "FinishJob"}
    return sorted(rpcs, key=lambda rpc: (SERVICES.index(rpc.service), rpc.method.name in last))
