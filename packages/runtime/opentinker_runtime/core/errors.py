"""Errors raised by the shared service core; each one carries a message a user can act on."""

from __future__ import annotations

# trailing-metadata names and readers live with the wire's other conventions
from opentinker_api.conventions import (  # noqa: F401 - part of this module's interface
    REASON_METADATA_KEY,
    TRACEBACK_METADATA_KEY,
    reason_from_metadata,
    traceback_from_metadata,
)


class OpenTinkerCoreError(Exception):
    """Base class for errors raised by `opentinker_runtime.core`."""


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
