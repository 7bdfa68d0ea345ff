"""A SIGTERM that the kernel hands to one of the dashboard's other threads (gRPC's, the HTTP
server's) still stops it: the main thread must not sleep through the flag the signal sets."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

import pytest

SYS_TGKILL = {"x86_64": 234, "aarch64": 131}.get(os.uname().machine)


@pytest.mark.skipif(sys.platform != "linux" or SYS_TGKILL is None, reason="tgkill is a Linux system call")
def test_sigterm_delivered_to_another_thread_stops_the_dashboard():
    process = subprocess.Popen([sys.executable, "-m", "opentinker.dashboard", "--scheduler", "127.0.0.1:1",
                                "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert process.stdout.readline().startswith(b"dashboard: ")
        other = _another_thread(process.pid)
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.syscall(SYS_TGKILL, process.pid, other, signal.SIGTERM) == 0, os.strerror(ctypes.get_errno())
        assert process.wait(timeout=5) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _another_thread(pid: int, timeout: float = 5) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        others = sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task") if int(tid) != pid)
        if others:
            return others[0]
        time.sleep(0.05)
    raise AssertionError("the dashboard started no thread besides its main one")
