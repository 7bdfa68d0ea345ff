"""Ask a gRPC server for its `grpc.health.v1` status.

Used by `opentinker up/status` and, as `python -m opentinker.cli.health_probe HOST:PORT`,
by the docker-compose healthchecks (exit 0 iff the server answers SERVING).
"""

import argparse
import sys

import grpc

from opentinker.client.tls import ClientTls, open_channel
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVING = "SERVING"
UNREACHABLE = "UNREACHABLE"

# Local probes must never go through an http(s)_proxy from the environment.
_CHANNEL_OPTIONS = [("grpc.enable_http_proxy", 0)]


def check_health(address: str, service: str = "", timeout: float = 2.0, tls: ClientTls | None = None) -> str:
    """Return the serving status name reported by `address` for `service` ("" = whole server).

    One of SERVING, NOT_SERVING, UNKNOWN, SERVICE_UNKNOWN when the server answers;
    UNREACHABLE when nothing answers within `timeout` seconds; otherwise the gRPC status
    code name of the failed call (e.g. UNIMPLEMENTED when the server has no health service).
    """
    with open_channel(address, _CHANNEL_OPTIONS, tls) as channel:  # TLS: `tls`, else the environment's CA
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as error:
            code = error.code()
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return UNREACHABLE
            if code is grpc.StatusCode.NOT_FOUND:
                return "SERVICE_UNKNOWN"
            return code.name
    return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)


def check_http_health(address: str, timeout: float = 2.0) -> str:
    """SERVING when GET http://address/healthz answers 200 (the dashboard), else UNREACHABLE."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    try:
        with opener.open(f"http://{address}/healthz", timeout=timeout) as response:
            return SERVING if response.status == 200 else f"HTTP_{response.status}"
    except OSError:
        return UNREACHABLE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m opentinker.cli.health_probe",
        description="Exit 0 iff the gRPC server at ADDRESS reports SERVING.",
    )
    parser.add_argument("address", help="HOST:PORT of the gRPC server")
    parser.add_argument("--service", default="", help='service name to check ("" = whole server)')
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for an answer")
    args = parser.parse_args(argv)
    status = check_health(args.address, args.service, args.timeout)
    print(f"{args.address}: {status}")
    return 0 if status == SERVING else 1


if __name__ == "__main__":
    sys.exit(main())
