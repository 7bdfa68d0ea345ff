"""The Rollout worker's operations, one per RolloutService RPC, in domain terms (no protobuf, no
grpc): policies (`PolicyRegistry`), sampling (`sampler`) and episode runs (`episode_runs`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from opentinker_runtime.edge.lease import LeaseContext
from opentinker_rollout.engine import SamplingConfig
from opentinker_rollout.envhost_client import EnvHostChannels
from opentinker_rollout.episode_runs import EpisodeRun, EpisodeRunner
from opentinker_rollout.policies import LoadRequest, PolicyInfo, PolicyRegistry, WeightsChunk, WeightsHeader
from opentinker_rollout.runner import EpisodeResult
from opentinker_rollout.sampler import Prompt, PromptCompletions, sample


class Rollout:
    """Every RolloutService operation over one PolicyRegistry and its environment channels."""

    def __init__(self, registry: PolicyRegistry, channels: EnvHostChannels, episodes: EpisodeRunner) -> None:
        self.registry = registry
        self.channels = channels
        self.episodes = episodes

    def job_of_policy(self, policy_id: str) -> str:
        """The job a policy serves ("" for none); NotFound for a policy not loaded here."""
        return self.registry.get(policy_id).job_id

    async def load(self, request: LoadRequest) -> PolicyInfo:
        return await self.registry.load(request)

    async def unload(self, policy_id: str, lease: LeaseContext) -> PolicyInfo:
        """Unload the policy; its job is ending, so its parked EnvHost sessions close now, while
        the job's token still opens them."""
        info = await self.registry.unload(policy_id, lease)
        await self.channels.sessions.job_stopped(info.job_id)
        return info

    async def update_weights(self, policy_id: str, lease: LeaseContext, header: WeightsHeader,
                             chunks: AsyncIterator[WeightsChunk]) -> tuple[PolicyInfo, int]:
        return await self.registry.update_weights(policy_id, lease, header, chunks)

    async def sample(self, policy_id: str, prompts: Sequence[Prompt], sampling: SamplingConfig, *,
                     prompt_logprobs: bool) -> list[PromptCompletions]:
        return await sample(self.registry.get(policy_id), prompts, sampling, prompt_logprobs=prompt_logprobs)

    def run_episodes(self, run: EpisodeRun, job_token: str) -> AsyncIterator[EpisodeResult]:
        return self.episodes.start(run, job_token)
