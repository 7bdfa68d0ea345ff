"""The stack a learning bench runs on: an existing one (--scheduler), or a private one it starts
with `opentinker up` on --base-port and stops at the end."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CLI = [sys.executable, "-m", "opentinker.cli.main"]


@dataclass(frozen=True, kw_only=True)
class Stack:
    scheduler: str
    api_key: str | None
    """None: clients find the key as usual (an existing stack)."""
    state_dir: Path | None
    """The private stack's state directory (its checkpoints live there); None for an existing one."""


@contextlib.contextmanager
def bench_stack(scheduler: str | None, base_port: int, state_dir: Path, *,
                up_timeout: float | None = None) -> Iterator[Stack]:
    """`up_timeout`: seconds `opentinker up` may wait for the services to serve (None: its default,
    30 s; a busy 2-core machine may need more for the Trainer and Rollout to import torch)."""
    if scheduler:
        yield Stack(scheduler=scheduler, api_key=None, state_dir=None)
        return
    timeout = ["--timeout", str(up_timeout)] if up_timeout is not None else []
    subprocess.run([*CLI, "up", "--state-dir", str(state_dir), "--base-port", str(base_port), "--no-dashboard",
                    "--redis-port", str(base_port + 10), *timeout], check=True, stdout=subprocess.DEVNULL,
                   env={k: v for k, v in os.environ.items() if k != "OPENTINKER_API_KEY"})
    try:
        yield Stack(scheduler=f"127.0.0.1:{base_port}", api_key=(state_dir / "admin.key").read_text().strip(),
                    state_dir=state_dir)
    finally:
        subprocess.run([*CLI, "down", "--state-dir", str(state_dir)], check=False, stdout=subprocess.DEVNULL)
