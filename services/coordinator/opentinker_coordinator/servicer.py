"""The CoordinatorService servicer: converts protobuf <-> domain objects (no RPC is built yet)."""

from opentinker.api.coordinator.v1 import coordinator_service_pb2, coordinator_service_pb2_grpc
from opentinker.core.server import ServiceBinding
from opentinker.core.unimplemented import unimplemented_servicer

SERVICE_FULL_NAME = coordinator_service_pb2.DESCRIPTOR.services_by_name["CoordinatorService"].full_name


def coordinator_service_binding() -> ServiceBinding:
    """The CoordinatorService to host; every RPC answers UNIMPLEMENTED for now."""
    base = coordinator_service_pb2_grpc.CoordinatorServiceServicer
    servicer = unimplemented_servicer(base, SERVICE_FULL_NAME)
    return ServiceBinding(full_name=SERVICE_FULL_NAME, servicer=servicer,
                          add_to_server=coordinator_service_pb2_grpc.add_CoordinatorServiceServicer_to_server)
