"""The SchedulerService servicer: converts protobuf <-> domain objects (no RPC is built yet)."""

from opentinker.api.scheduler.v1 import scheduler_service_pb2, scheduler_service_pb2_grpc
from opentinker.core.server import ServiceBinding
from opentinker.core.unimplemented import unimplemented_servicer

SERVICE_FULL_NAME = scheduler_service_pb2.DESCRIPTOR.services_by_name["SchedulerService"].full_name


def scheduler_service_binding() -> ServiceBinding:
    """The SchedulerService to host; every RPC answers UNIMPLEMENTED for now."""
    base = scheduler_service_pb2_grpc.SchedulerServiceServicer
    servicer = unimplemented_servicer(base, SERVICE_FULL_NAME)
    return ServiceBinding(full_name=SERVICE_FULL_NAME, servicer=servicer,
                          add_to_server=scheduler_service_pb2_grpc.add_SchedulerServiceServicer_to_server)
