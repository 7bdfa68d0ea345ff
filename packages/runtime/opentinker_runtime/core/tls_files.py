"""A process's TLS mode and PEM files (no grpc here: settings import it; `auth.tls` makes the
credentials)."""

from __future__ import annotations

from dataclasses import dataclass

TLS_MODES = ("off", "on", "mutual")
OFF, ON, MUTUAL = TLS_MODES


@dataclass(frozen=True, kw_only=True)
class TlsFiles:
    """A process's TLS mode and PEM files: its certificate chain and key, and the CA it trusts."""

    mode: str = OFF
    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""

    @property
    def enabled(self) -> bool:
        return self.mode != OFF

    @property
    def mutual(self) -> bool:
        return self.mode == MUTUAL

    def missing(self) -> list[str]:
        """What this mode needs and is not set: cert and key (a server's; a client's too when
        mutual) and the CA."""
        if not self.enabled:
            return []
        return [name for name in ("cert_file", "key_file", "ca_file") if not getattr(self, name)]
