"""The RolloutService servicer: converts protobuf <-> domain objects (no RPC is built yet)."""

from opentinker.api.rollout.v1 import rollout_service_pb2, rollout_service_pb2_grpc
from opentinker.core.server import ServiceBinding
from opentinker.core.unimplemented import unimplemented_servicer

SERVICE_FULL_NAME = rollout_service_pb2.DESCRIPTOR.services_by_name["RolloutService"].full_name


def rollout_service_binding() -> ServiceBinding:
    """The RolloutService to host; every RPC answers UNIMPLEMENTED for now."""
    base = rollout_service_pb2_grpc.RolloutServiceServicer
    servicer = unimplemented_servicer(base, SERVICE_FULL_NAME)
    return ServiceBinding(full_name=SERVICE_FULL_NAME, servicer=servicer,
                          add_to_server=rollout_service_pb2_grpc.add_RolloutServiceServicer_to_server)
