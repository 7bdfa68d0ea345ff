"""Errors raised by the shared service core; each one carries a message a user can act on."""

from __future__ import annotations


class OpenTinkerCoreError(Exception):
    """Base class for errors raised by `opentinker.core`."""


class SettingsError(OpenTinkerCoreError, ValueError):
    """An environment variable is malformed, out of range or unknown."""


class PortInUseError(OpenTinkerCoreError, OSError):
    """The gRPC server could not bind host:port (usually: another process holds the port)."""

    def __init__(self, *, address: str, env_var: str) -> None:
        self.address = address
        self.env_var = env_var
        super().__init__(
            f"cannot listen on {address}: the port is already in use (or the host is not a "
            f"local address); stop the other process or set {env_var} to a free port")


class RedisUnavailableError(OpenTinkerCoreError, ConnectionError):
    """Redis did not answer PING within the allowed attempts."""


class EmbeddedRedisError(OpenTinkerCoreError, RuntimeError):
    """The embedded redis-server could not be found, started or stopped."""


# Trailing metadata every service uses for machine-readable error details (any language can
# read them): the common.v1.ErrorReason value name, and a user game's traceback (UTF-8 bytes).
REASON_METADATA_KEY = "opentinker-reason"
TRACEBACK_METADATA_KEY = "opentinker-traceback-bin"


def _metadata_text(metadata, key: str) -> str:  # noqa: ANN001 - grpc trailing metadata (pairs)
    for name, value in metadata or ():
        if name == key:
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return ""


def traceback_from_metadata(metadata) -> str:  # noqa: ANN001 - grpc trailing metadata (pairs); no grpc import
    """A user game's traceback from an error's trailing metadata ("" if it carries none)."""
    return _metadata_text(metadata, TRACEBACK_METADATA_KEY)


def reason_from_metadata(metadata) -> str:  # noqa: ANN001 - grpc trailing metadata (pairs); no grpc import
    """The ErrorReason name an error carries ("" if none), e.g. "ERROR_REASON_AGENT_LOST"."""
    return _metadata_text(metadata, REASON_METADATA_KEY)
