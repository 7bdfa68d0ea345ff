"""TLS for clients of a stack that runs with OPENTINKER_TLS=on or mutual.

A client dials over TLS when it has the stack's CA: `ClientTls(ca_file=...)` passed to a client,
or OPENTINKER_TLS_CA_FILE in the environment (what `opentinker up --tls` prints and the CLI
reads). For mutual TLS it presents its own certificate too: `cert_file` and `key_file`, or
OPENTINKER_TLS_CERT_FILE and OPENTINKER_TLS_KEY_FILE. No CA: plaintext, as before.

    client = SchedulerClient("10.0.0.5:50051", tls=ClientTls(ca_file="ca.pem"))
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

CA_ENV, CERT_ENV, KEY_ENV = "OPENTINKER_TLS_CA_FILE", "OPENTINKER_TLS_CERT_FILE", "OPENTINKER_TLS_KEY_FILE"


@dataclass(frozen=True, kw_only=True)
class ClientTls:
    """The CA that signs the stack's servers; this client's certificate and key for mutual TLS."""

    ca_file: str
    cert_file: str = ""
    key_file: str = ""

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("a client certificate needs its key and a key its certificate: set both "
                             f"cert_file and key_file ({CERT_ENV}, {KEY_ENV}) or neither")

    def credentials(self) -> grpc.ChannelCredentials:
        if self.cert_file:
            return grpc.ssl_channel_credentials(root_certificates=_read(self.ca_file),
                                                private_key=_read(self.key_file),
                                                certificate_chain=_read(self.cert_file))
        return grpc.ssl_channel_credentials(root_certificates=_read(self.ca_file))


def tls_from_env(environ: Mapping[str, str] | None = None) -> ClientTls | None:
    """The environment's ClientTls, or None when it names no CA (plaintext)."""
    env = os.environ if environ is None else environ
    if not env.get(CA_ENV):
        return None
    return ClientTls(ca_file=env[CA_ENV], cert_file=env.get(CERT_ENV, ""), key_file=env.get(KEY_ENV, ""))


def open_channel(address: str, options: Sequence[tuple[str, Any]] = (), tls: ClientTls | None = None) -> grpc.Channel:
    """A blocking channel to `address`: over TLS with `tls` (else the environment's), or plaintext."""
    tls = tls or tls_from_env()
    if tls is None:
        return grpc.insecure_channel(address, options=list(options))
    return grpc.secure_channel(address, tls.credentials(), options=list(options))


def open_aio_channel(address: str, options: Sequence[tuple[str, Any]] = (),
                     tls: ClientTls | None = None) -> grpc.aio.Channel:
    """An asyncio channel to `address`, as `open_channel`."""
    tls = tls or tls_from_env()
    if tls is None:
        return grpc.aio.insecure_channel(address, options=list(options))
    return grpc.aio.secure_channel(address, tls.credentials(), options=list(options))


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise ValueError(f"cannot read the TLS file {path}: {error.strerror or error}") from error
