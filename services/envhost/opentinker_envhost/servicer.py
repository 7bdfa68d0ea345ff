"""The EnvHostService servicer: converts protobuf <-> domain objects (no RPC is built yet)."""

from opentinker.api.envhost.v1 import envhost_service_pb2, envhost_service_pb2_grpc
from opentinker.core.server import ServiceBinding
from opentinker.core.unimplemented import unimplemented_servicer

SERVICE_FULL_NAME = envhost_service_pb2.DESCRIPTOR.services_by_name["EnvHostService"].full_name


def envhost_service_binding() -> ServiceBinding:
    """The EnvHostService to host; every RPC answers UNIMPLEMENTED for now."""
    base = envhost_service_pb2_grpc.EnvHostServiceServicer
    servicer = unimplemented_servicer(base, SERVICE_FULL_NAME)
    return ServiceBinding(full_name=SERVICE_FULL_NAME, servicer=servicer,
                          add_to_server=envhost_service_pb2_grpc.add_EnvHostServiceServicer_to_server)
