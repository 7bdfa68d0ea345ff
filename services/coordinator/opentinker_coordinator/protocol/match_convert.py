"""protobuf <-> domain conversions of the multi-agent protocol (matches, turns, barriers)."""

from __future__ import annotations

import re

from google.protobuf import json_format, struct_pb2

from opentinker_api.common.v1 import environment_pb2, progress_pb2
from opentinker_api.coordinator.v1 import coordinator_service_pb2 as pb
from opentinker_coordinator.protocol.matches import ActionResult, GrantedTurn, Match, MatchState
from opentinker_coordinator.protocol.protocol_errors import InvalidProtocolRequest
from opentinker_coordinator.protocol.seated_environment import MatchEnvironmentRef

MATCH_STATES = {
    MatchState.WAITING_FOR_AGENTS: pb.Match.STATE_WAITING_FOR_AGENTS,
    MatchState.IN_PROGRESS: pb.Match.STATE_IN_PROGRESS,
    MatchState.FINISHED: pb.Match.STATE_FINISHED,
    MatchState.ABORTED: pb.Match.STATE_ABORTED,
}
BARRIER_PHASES = {
    progress_pb2.PHASE_ROLLOUT: "ROLLOUT",
    progress_pb2.PHASE_UPDATE: "UPDATE",
    progress_pb2.PHASE_WEIGHT_SYNC: "WEIGHT_SYNC",
}


ADDRESS = re.compile(r"^[\x21-\x7e]{1,255}:[0-9]{1,5}$")
"""host:port (any printable ASCII host, a dns:/// or ipv4: target included); empty = the default."""


def environment_ref(message: environment_pb2.EnvironmentReference) -> MatchEnvironmentRef:
    if message.envhost_address and not ADDRESS.match(message.envhost_address):
        raise InvalidProtocolRequest("environment.envhost_address: must be host:port (printable ASCII), "
                                     f"got {message.envhost_address[:80]!r}")
    return MatchEnvironmentRef(env_name=message.env_name, config=struct_dict(message.config, "environment.config"),
                               envhost_address=message.envhost_address)


def struct_dict(struct: struct_pb2.Struct, field: str) -> dict:
    """A Struct (config, kwargs) as a dict; NaN and Infinity have no JSON form: INVALID_ARGUMENT."""
    try:
        return json_format.MessageToDict(struct)
    except ValueError as error:
        raise InvalidProtocolRequest(f"{field}: numbers must be finite (NaN and Infinity have no JSON "
                                     f"form): {error}") from error


def environment_message(environment: MatchEnvironmentRef) -> environment_pb2.EnvironmentReference:
    message = environment_pb2.EnvironmentReference(env_name=environment.env_name,
                                                   envhost_address=environment.envhost_address)
    message.config.update(dict(environment.config))
    return message


def match_message(match: Match) -> pb.Match:
    message = pb.Match(
        match_id=match.match_id, job_id=match.job_id, seats=list(match.seats),
        agents_by_seat=match.agents_by_seat, state=MATCH_STATES[match.state], turn_index=match.turn_index,
        current_seat=match.current_seat, rewards_by_seat=match.rewards_by_seat,
        outcomes_by_seat=match.outcomes_by_seat, message=match.message,
        history=[pb.MatchAction(turn_index=a.turn_index, seat=a.seat, agent_id=a.agent_id, action=a.action,
                                reward=a.reward, accepted=a.accepted) for a in match.history])
    if match.environment_ref is not None:
        message.environment.CopyFrom(environment_message(match.environment_ref))
    return message


def turn_response(turn: GrantedTurn) -> pb.AwaitTurnResponse:
    return pb.AwaitTurnResponse(turn_index=turn.turn_index, observation=turn.observation,
                                match_finished=turn.finished, reward=turn.reward, outcome=turn.outcome)


def action_response(result: ActionResult) -> pb.SubmitActionResponse:
    return pb.SubmitActionResponse(observation=result.observation, reward=result.reward,
                                   match_finished=result.finished, accepted=result.accepted,
                                   outcome=result.outcome)


def barrier_phase(phase: int) -> str:
    if phase not in BARRIER_PHASES:
        raise InvalidProtocolRequest("phase: barriers are at the end of PHASE_ROLLOUT, PHASE_UPDATE or "
                                     "PHASE_WEIGHT_SYNC")
    return BARRIER_PHASES[phase]
