"""Test certificates made with the openssl CLI: a CA, a server certificate for 127.0.0.1 and
localhost, a client certificate, and a second CA's server certificate (one the first CA never
signed)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path
    rogue_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(directory: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
             "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=directory)


def _signed(directory: Path, name: str, ca: str, extensions: str) -> None:
    (directory / f"{name}.ext").write_text(extensions)
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", f"/CN={name}",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=directory)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=directory)


SERVER_EXT = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"
CLIENT_EXT = "extendedKeyUsage=clientAuth\n"


def make_certs(directory: Path) -> Certs:
    _ca(directory, "ca")
    _ca(directory, "rogue-ca")
    _signed(directory, "server", "ca", SERVER_EXT)
    _signed(directory, "client", "ca", CLIENT_EXT)
    _signed(directory, "rogue", "rogue-ca", SERVER_EXT)
    d = directory
    return Certs(ca=d / "ca.pem", server_cert=d / "server.pem", server_key=d / "server.key",
                 client_cert=d / "client.pem", client_key=d / "client.key", rogue_cert=d / "rogue.pem",
                 rogue_key=d / "rogue.key")
