"""A game that misbehaves on demand, in every way the EnvHost's sandbox must contain.

`Misbehaving` plays a one-step echo ("say ok") unless told to misbehave: by the reset kwarg
`behaviour` ("reset:<kind>" or "step:<kind>"), by the step action "misbehave:<kind>", or, in an RL job
(reset(index=i, split="train")), by TRAIN_SCHEDULE[i % len(TRAIN_SCHEDULE)]. The kinds are the
functions in MISBEHAVIOURS; `None` from one means "behave after all" (print does that).
"""

from __future__ import annotations

import ctypes
import os
import stat
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from opentinker_env import AbstractGame, StepResult

OK_OBSERVATION = "ok"
ACTION_PREFIX = "misbehave:"
PRINTED_LINE = "misbehaving game says hello on stdout"


def _raise() -> Any:
    raise RuntimeError("misbehaving: raised on purpose")


def _busy() -> Any:
    while True:  # burns CPU without ever returning
        pass


def _hang() -> Any:
    time.sleep(3600)


def _leak() -> Any:
    hoard = []
    while True:
        hoard.append(bytearray(8 << 20))  # touched: real memory, not just address space


def _print() -> Any:
    for number in range(5):
        print(f"{PRINTED_LINE} {number}")
        print(f"misbehaving game on stderr {number}", file=sys.stderr)
    return None


def _flood() -> Any:
    chunk = "flood " * 1000 + "\n"
    for _ in range(2000):  # about 12 MB
        sys.stdout.write(chunk)
    return None


def _exit() -> Any:
    os._exit(3)


def _segfault() -> Any:
    ctypes.string_at(0)  # reads address 0: SIGSEGV


def _non_utf8() -> Any:
    return "bad text \udcff"


def _bytes() -> Any:
    return b"bytes, not str"


def _huge() -> Any:
    return "x" * 2_000_000


def _frame_bomb() -> Any:
    """Write a frame header announcing 2 GiB straight into the session socket, then wait."""
    for fd in range(3, 64):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.write(fd, struct.pack(">I", 2**31) + b"x" * 1024)
        except OSError:
            continue
    time.sleep(3600)


def _spawn_and_hang() -> Any:
    """Start a grandchild process (which must not outlive the session), then hang."""
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    time.sleep(3600)


def _read_secrets() -> Any:
    """The names of the OPENTINKER_* variables (the API key among them) this game can read."""
    return ",".join(sorted(name for name in os.environ if name.startswith("OPENTINKER_")))


MISBEHAVIOURS: dict[str, Callable[[], Any]] = {
    "raise": _raise, "busy": _busy, "hang": _hang, "leak": _leak, "print": _print, "flood": _flood,
    "exit": _exit, "segfault": _segfault, "non_utf8": _non_utf8, "bytes": _bytes, "huge": _huge,
    "frame_bomb": _frame_bomb, "spawn_and_hang": _spawn_and_hang, "read_secrets": _read_secrets,
}
RETURNING = ("non_utf8", "bytes", "huge", "read_secrets")
"""Kinds whose value is returned as the observation."""

TRAIN_SCHEDULE = ("", "reset:raise", "", "reset:non_utf8", "reset:print", "reset:exit", "reset:leak",
                  "reset:busy")
"""What the train episode with index i does (i % 8): "" behaves. Train index i is played by all
the episodes of group "train-<i>", so a misbehaving index fails its whole group. All happen in
reset(): an RL job's step may never come (an action cut by max_new_tokens ends the episode
without a step)."""
FAILING_INDEXES = tuple(i for i, b in enumerate(TRAIN_SCHEDULE) if b and not b.endswith(":print"))


class Misbehaving(AbstractGame):
    """Say ok; misbehaves as its episode or action says (see the module docstring)."""

    multi_turn = False

    def get_system_prompt(self) -> str:
        return "Say ok."

    def get_initial_user_message(self) -> str:
        return ""

    def reset(self, *, index: int = 0, split: str = "train", behaviour: str = "") -> str:
        if not behaviour and split == "train":
            behaviour = TRAIN_SCHEDULE[index % len(TRAIN_SCHEDULE)]
        self.call, _, self.kind = behaviour.partition(":")
        return self._maybe_misbehave("reset", "Go.")

    def step(self, action: str) -> StepResult:
        if action.startswith(ACTION_PREFIX):
            self.call, self.kind = "step", action.removeprefix(ACTION_PREFIX)
        observation = self._maybe_misbehave("step", OK_OBSERVATION)
        return StepResult(observation=observation, reward=float(len(action) % 3) / 2, done=True)

    def _maybe_misbehave(self, call: str, normal: Any) -> Any:
        if self.call != call or not self.kind:
            return normal
        value = MISBEHAVIOURS[self.kind]()
        return value if self.kind in RETURNING else normal
