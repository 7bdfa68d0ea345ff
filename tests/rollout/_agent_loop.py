"""One episode of the agent-loop FSM played against a scripted generator, renderer and
environment (test_fsm.py, test_match_episodes.py)."""

from __future__ import annotations

import asyncio

from opentinker_rollout.engine import SamplingConfig
from opentinker_rollout.episode import Episode, EpisodeLimits
from opentinker_rollout.fsm import AgentLoop, AgentLoopConfig
from tests.rollout._support import ScriptedEnvironment, ScriptedGenerator, ScriptedRenderer

PROMPT = [11, 12, 13]
OBSERVATION = [21, 22]
NO_LIMITS = EpisodeLimits()


def play(script, outcomes=(), *, limits=NO_LIMITS, context=512, max_new_tokens=16,
         environment=None, version=0, generator=None):
    generator = generator or ScriptedGenerator(script, version=version)
    environment = environment or ScriptedEnvironment(outcomes=list(outcomes))
    config = AgentLoopConfig(sampling=SamplingConfig(max_new_tokens=max_new_tokens),
                             limits=limits, max_context_length=context)
    loop = AgentLoop(generator=generator, renderer=ScriptedRenderer(PROMPT, OBSERVATION),
                     environment=environment, config=config)
    episode = asyncio.run(loop.run(Episode(group_id="g", episode_index=0)))
    return episode, generator, environment
