"""`opentinker up --tls`'s local CA: made once per state dir with openssl, keys owner-only, the
stack certificate signed by the CA for the loopback names and the bound host."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

from opentinker.cli.local_ca import ensure_local_ca, subject_alt_names


def test_the_local_ca_signs_one_stack_certificate_for_the_loopback_names_and_the_host(tmp_path: Path) -> None:
    files = ensure_local_ca(tmp_path, "10.1.2.3")
    for key in (files.key_file, files.ca_file.with_suffix(".key")):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(files.ca_file.parent.stat().st_mode) == 0o700
    verified = subprocess.run(["openssl", "verify", "-CAfile", str(files.ca_file), str(files.cert_file)],
                              capture_output=True, text=True, check=False)
    assert verified.returncode == 0, verified.stderr
    text = subprocess.run(["openssl", "x509", "-in", str(files.cert_file), "-noout", "-text"],
                          capture_output=True, text=True, check=True).stdout
    assert "IP Address:127.0.0.1" in text and "DNS:localhost" in text and "IP Address:10.1.2.3" in text
    assert "TLS Web Server Authentication" in text and "TLS Web Client Authentication" in text
    before = files.cert_file.read_bytes()
    assert ensure_local_ca(tmp_path, "10.1.2.3").cert_file.read_bytes() == before  # kept across ups
    assert files.env("mutual")["OPENTINKER_TLS"] == "mutual"


def test_subject_alt_names_keep_loopback_and_add_a_named_host() -> None:
    assert subject_alt_names("0.0.0.0") == "IP:127.0.0.1,DNS:localhost"
    assert subject_alt_names("gpu-box.lan") == "IP:127.0.0.1,DNS:localhost,DNS:gpu-box.lan"
    assert subject_alt_names("::1").endswith("IP:::1")
