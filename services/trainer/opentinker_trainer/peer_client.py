"""Asking another Trainer to start the ranks of a data-parallel session whose rank 0 is here
(StartReplicas), with this Trainer's admin key and the job's token: the `start_peer` of the
SessionRegistry. Its address is the job's Trainer assignment there (from the job's driver,
admin keys only), never one a tenant chose."""

from __future__ import annotations

import grpc

from opentinker_api.trainer.v1 import trainer_service_pb2 as pb
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as pb_grpc
from opentinker_runtime.auth.channels import authenticated_channel
from opentinker_runtime.edge.convert import lease_to_proto
from opentinker_trainer.errors import PeerRefusedError
from opentinker_trainer.remote_replicas import ReplicaPeer
from opentinker_trainer.replicas import ReplicaInvite

START_REPLICAS_TIMEOUT_S = 60.0


class PeerClient:
    def __init__(self, api_key: str) -> None:
        self.api_key = api_key

    async def start(self, peer: ReplicaPeer, invite: ReplicaInvite, job_token: str, session_id: str) -> None:
        request = pb.StartReplicasRequest(
            lease=lease_to_proto(peer.lease), device_ids=list(peer.device_ids), first_rank=invite.first_rank,
            world_size=invite.world_size, store_address=invite.store_address,
            command_address=invite.command_address, authkey=invite.authkey, session_id=session_id)
        async with authenticated_channel(peer.address, self.api_key, job_token=job_token) as channel:
            try:
                await pb_grpc.TrainerServiceStub(channel).StartReplicas(request, timeout=START_REPLICAS_TIMEOUT_S)
            except grpc.aio.AioRpcError as error:
                raise PeerRefusedError(peer.address, error.code().name, error.details() or "") from error
