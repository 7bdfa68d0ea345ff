"""`opentinker up --tls`: a local certificate authority for the embedded stack, made once per
state directory with the openssl command-line tool:

    <state-dir>/tls/ca.pem       the CA's certificate (what every service and client trusts)
    <state-dir>/tls/ca.key       its key (owner-only; signs the certificate below, nothing else)
    <state-dir>/tls/stack.pem    one certificate for the stack's processes, for 127.0.0.1,
                                 localhost and the host they bind: servers present it, and with
                                 mutual TLS every service and the CLI present it as clients too
    <state-dir>/tls/stack.key    its key (owner-only)

Kept across `down`/`up` (clients keep trusting the same CA); delete the directory to make new ones.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from opentinker.cli.errors import StackError

TLS_DIR = "tls"
DAYS = 825


@dataclass(frozen=True, kw_only=True)
class StackTls:
    ca_file: Path
    cert_file: Path
    key_file: Path

    def env(self, mode: str) -> dict[str, str]:
        """The variables that put a stack's process (or a client) on TLS with these files."""
        return {"OPENTINKER_TLS": mode, "OPENTINKER_TLS_CA_FILE": str(self.ca_file),
                "OPENTINKER_TLS_CERT_FILE": str(self.cert_file), "OPENTINKER_TLS_KEY_FILE": str(self.key_file)}


def stack_tls_files(state_dir: Path) -> StackTls:
    directory = state_dir / TLS_DIR
    return StackTls(ca_file=directory / "ca.pem", cert_file=directory / "stack.pem", key_file=directory / "stack.key")


def ensure_local_ca(state_dir: Path, host: str, *more_hosts: str) -> StackTls:
    """The state directory's CA and stack certificate, made on first use (for 127.0.0.1,
    localhost, `host` and `more_hosts`: a stack spread over several addresses)."""
    files = stack_tls_files(state_dir)
    if files.ca_file.is_file() and files.cert_file.is_file() and files.key_file.is_file():
        return files
    if shutil.which("openssl") is None:
        raise StackError("--tls makes a local CA with the openssl command, which is not installed; "
                         "install openssl, or run with your own certificates (OPENTINKER_TLS_* settings)")
    directory = files.ca_file.parent
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        work = Path(scratch)
        _openssl(work, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-days", str(DAYS), "-subj", "/CN=OpenTinker local stack CA", "-keyout", "ca.key", "-out", "ca.pem",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        (work / "stack.ext").write_text(f"subjectAltName={subject_alt_names(host, *more_hosts)}\n"
                                        "extendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n")
        _openssl(work, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-subj", "/CN=OpenTinker local stack", "-keyout", "stack.key", "-out", "stack.csr")
        _openssl(work, "x509", "-req", "-in", "stack.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", str(DAYS), "-extfile", "stack.ext", "-out", "stack.pem")
        for name in ("ca.key", "stack.key"):
            os.chmod(work / name, 0o600)
        for name in ("ca.key", "ca.pem", "stack.key", "stack.pem"):
            os.replace(work / name, directory / name)
    return files


def subject_alt_names(*hosts: str) -> str:
    """127.0.0.1 and localhost, and each bound host that is another (0.0.0.0 binds all: only the
    loopback names then)."""
    names = ["IP:127.0.0.1", "DNS:localhost"]
    for host in hosts:
        if not host or host in ("127.0.0.1", "localhost", "0.0.0.0", "::", "[::]"):
            continue
        try:
            names.append(f"IP:{ipaddress.ip_address(host.strip('[]'))}")
        except ValueError:
            names.append(f"DNS:{host}")
    return ",".join(dict.fromkeys(names))


def _openssl(cwd: Path, *args: str) -> None:
    try:
        subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)
    except subprocess.CalledProcessError as error:
        raise StackError(f"openssl {args[0]} failed making the local CA: "
                         f"{error.stderr.decode(errors='replace').strip()[-300:]}") from error
