"""The TrainerService servicer: converts protobuf <-> domain objects (no RPC is built yet)."""

from opentinker.api.trainer.v1 import trainer_service_pb2, trainer_service_pb2_grpc
from opentinker.core.server import ServiceBinding
from opentinker.core.unimplemented import unimplemented_servicer

SERVICE_FULL_NAME = trainer_service_pb2.DESCRIPTOR.services_by_name["TrainerService"].full_name


def trainer_service_binding() -> ServiceBinding:
    """The TrainerService to host; every RPC answers UNIMPLEMENTED for now."""
    base = trainer_service_pb2_grpc.TrainerServiceServicer
    servicer = unimplemented_servicer(base, SERVICE_FULL_NAME)
    return ServiceBinding(full_name=SERVICE_FULL_NAME, servicer=servicer,
                          add_to_server=trainer_service_pb2_grpc.add_TrainerServiceServicer_to_server)
