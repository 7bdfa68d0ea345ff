"""TLS between services: `OPENTINKER_TLS` = off (plaintext, the default), on (every server
presents its certificate, every caller checks it against the CA) or mutual (servers also demand
a client certificate signed by the CA, and every service presents its own).

One process has one TLS configuration (its settings): servers use `server_credentials`, and
`channel_credentials` is what `auth.channels.authenticated_channel` dials every peer with once
`use_for_channels` has been called (at server start). Certificates and keys are PEM files, read
when a server or channel is made; a caller's hostname check is against the address it dials
(`127.0.0.1`, `scheduler`), so a certificate names those in its subjectAltName.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from opentinker_runtime.core.tls_files import TlsFiles


def server_credentials(tls: TlsFiles) -> grpc.ServerCredentials:
    """The server side: its certificate; when mutual, clients must present one the CA signed."""
    return grpc.ssl_server_credentials([(_read(tls.key_file), _read(tls.cert_file))],
                                       root_certificates=_read(tls.ca_file) if tls.mutual else None,
                                       require_client_auth=tls.mutual)


def channel_credentials(tls: TlsFiles) -> grpc.ChannelCredentials:
    """The caller's side: the CA that signs the servers; when mutual, its own certificate too."""
    if tls.mutual:
        return grpc.ssl_channel_credentials(root_certificates=_read(tls.ca_file),
                                            private_key=_read(tls.key_file), certificate_chain=_read(tls.cert_file))
    return grpc.ssl_channel_credentials(root_certificates=_read(tls.ca_file))


_channels = TlsFiles()


def use_for_channels(tls: TlsFiles) -> None:
    """Dial every peer of this process with `tls` from now on (`authenticated_channel`)."""
    global _channels
    _channels = tls


def channels_tls() -> TlsFiles:
    """How this process dials its peers."""
    return _channels


def _read(path: str) -> bytes:
    return Path(path).read_bytes()
