"""One terminal for a tutorial: bash blocks run one after another as if typed into it.

Each block runs as `bash -e -o pipefail -c BLOCK` in a session of its own, with `set -a` so
that every variable it sets is exported; its variables and the directory it ends in carry over
to the next block, as in a terminal. What a
block leaves running in the background (`cmd &`) stays in that block's process group, so
`kill_leftovers` can always stop it.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

NOT_CARRIED = frozenset({"_", "PWD", "OLDPWD", "SHLVL"})


@dataclass(frozen=True, kw_only=True)
class BashResult:
    script: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float


class Terminal:
    def __init__(self, directory: Path, env: dict[str, str], scratch: Path) -> None:
        self.cwd, self.env = directory, dict(env)
        self.env_file, self.cwd_file = scratch / "env", scratch / "cwd"
        self.process_groups: list[int] = []

    def run(self, script: str, timeout: float) -> BashResult:
        """Run one block; the terminal's variables and directory follow it when it succeeds."""
        saving = f"\nenv -0 > {shlex.quote(str(self.env_file))}\npwd > {shlex.quote(str(self.cwd_file))}\n"
        started = time.monotonic()
        process = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", "set -a\n" + script + saving], cwd=self.cwd,
                                   env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.process_groups.append(process.pid)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._signal_group(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            stderr += f"\n(killed after {timeout:.0f} s)"
        if process.returncode == 0:
            self._carry_over()
        return BashResult(script=script, returncode=process.returncode, stdout=stdout, stderr=stderr,
                          seconds=time.monotonic() - started)

    def _carry_over(self) -> None:
        entries = self.env_file.read_bytes().decode().split("\0")
        pairs = (entry.partition("=") for entry in entries if "=" in entry)
        self.env = {name: value for name, _, value in pairs if name not in NOT_CARRIED}
        self.cwd = Path(self.cwd_file.read_text().strip())

    def kill_leftovers(self, grace: float = 10.0) -> None:
        """SIGTERM every process group a block started, SIGKILL what is left after `grace`."""
        for group in self.process_groups:
            self._signal_group(group, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(_group_exists(g) for g in self.process_groups) and time.monotonic() < deadline:
            time.sleep(0.2)
        for group in self.process_groups:
            self._signal_group(group, signal.SIGKILL)

    @staticmethod
    def _signal_group(group: int, signum: int) -> None:
        try:
            os.killpg(group, signum)
        except (ProcessLookupError, PermissionError):
            pass


def _group_exists(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
