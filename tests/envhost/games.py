"""Hand-written games that misbehave in the ways the EnvHost must survive."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from opentinker_env import AbstractGame, AsyncAbstractGame, NotYourTurn, StepResult
from opentinker_envhost.catalog import GameCatalog, GameSpec
from tests.chaos._misbehaving_games import Misbehaving


class Echo(AbstractGame):
    """Repeat the word, `turns` times.

    close() records the last word in `Echo.closed` and, when `closed_log` names a file, appends
    it there as a line (what a test can see of a game in its own process)."""

    closed: ClassVar[list[str]] = []

    def __init__(self, turns: int = 2, closed_log: str = "") -> None:
        self.turns = turns
        self.closed_log = closed_log

    def get_system_prompt(self) -> str:
        return "Repeat the word."

    def get_initial_user_message(self) -> str:
        return "Word:"

    def reset(self, *, word: str = "hi") -> str:
        self.word, self.left = word, self.turns
        return word

    def step(self, action: str) -> StepResult:
        self.left -= 1
        return StepResult(observation=self.word, reward=float(action == self.word),
                          done=self.left == 0, info={"left": self.left})

    def close(self) -> None:
        word = self.word if hasattr(self, "word") else ""
        Echo.closed.append(word)
        if self.closed_log:
            with open(self.closed_log, "a") as log:
                log.write(word + "\n")


def closed_words(closed_log: Path) -> list[str]:
    """The words Echo games with this `closed_log` closed on, in order."""
    return closed_log.read_text().splitlines() if closed_log.exists() else []


class Explode(Echo):
    """Raises in the method named by `fail_in` (init, reset or step)."""

    def __init__(self, fail_in: str = "step") -> None:
        if fail_in == "init":
            raise RuntimeError("boom in init")
        super().__init__(turns=5)
        self.fail_in = fail_in

    def reset(self, **kwargs: Any) -> str:
        if self.fail_in == "reset" and kwargs.get("fail", True):
            raise KeyError("boom in reset")
        return super().reset(word=kwargs.get("word", "hi"))

    def step(self, action: str) -> StepResult:
        if self.fail_in == "step" and action == "explode":
            raise ZeroDivisionError("boom in step")
        if self.fail_in == "step" and action == "explode-big":
            _recurse(60)
        return super().step(action)


def _recurse(depth: int) -> None:
    """Raise a long message from deep down: a traceback far over grpc's metadata limit."""
    if depth == 0:
        raise ValueError("huge " + "x" * 50_000)
    _recurse(depth - 1)


class Sleepy(Echo):
    """step() blocks its thread for `seconds` when the action is "sleep"."""

    def __init__(self, seconds: float = 1.0) -> None:
        super().__init__(turns=100)
        self.seconds = seconds

    def step(self, action: str) -> StepResult:
        if action == "sleep":
            time.sleep(self.seconds)
        return super().step(action)


class AsyncSleepy(AsyncAbstractGame):
    """Async: step() awaits `seconds` when the action is "sleep"."""

    multi_turn = False

    def __init__(self, seconds: float = 1.0) -> None:
        self.seconds = seconds

    def get_system_prompt(self) -> str:
        return "async"

    def get_initial_user_message(self) -> str:
        return ""

    async def reset(self, *, seed: int = 0) -> str:
        self.seed = seed
        return f"seed {seed}"

    async def step(self, action: str) -> StepResult:
        if action == "sleep":
            await asyncio.sleep(self.seconds)
        if action == "explode":
            raise LookupError("async boom")
        return StepResult(observation="", reward=float(self.seed), done=True)


class BadReturns(Echo):
    """reset() returns what `reset_returns` says; step() returns a huge observation."""

    def __init__(self, reset_returns: str = "number") -> None:
        super().__init__()
        self.reset_returns = reset_returns

    def reset(self, **kwargs: Any) -> str:
        super().reset()
        return 7 if self.reset_returns == "number" else "ok"  # type: ignore[return-value]

    def step(self, action: str) -> StepResult:
        return StepResult(observation="x" * 1000, done=False)


class Seated(Echo):
    """Two seats; the observation says who moved."""

    seats = ("black", "white")

    def step(self, action: str, seat: str = "") -> StepResult:  # type: ignore[override]
        return StepResult(observation=f"{seat} played {action}", done=False)


class Alternating(Echo):
    """Two seats that must alternate, black first; "" plays the seat to move."""

    seats = ("black", "white")

    def reset(self, **kwargs: Any) -> str:
        self.to_move = "black"
        return super().reset(**kwargs)

    def step(self, action: str, seat: str = "") -> StepResult:  # type: ignore[override]
        if seat and seat != self.to_move:
            raise NotYourTurn(f"seat: {self.to_move} is to move, not {seat}")
        mover, self.to_move = self.to_move, "white" if self.to_move == "black" else "black"
        return StepResult(observation=f"{mover} played {action}", done=False)


class Lingering(Echo):
    """Counts resets per game object and per class (what a kept process keeps between sessions);
    the step action "leave:<what>" leaves something behind in its process: a thread, a child
    process, a daemonised grandchild, an open file, another working directory or 16 MiB."""

    class_resets: ClassVar[int] = 0
    kept: ClassVar[list[Any]] = []

    def __init__(self, turns: int = 100) -> None:
        super().__init__(turns=turns)
        self.resets = 0

    def reset(self, *, word: str = "hi") -> str:
        self.resets += 1
        Lingering.class_resets += 1
        super().reset(word=word)
        return f"object {self.resets} class {Lingering.class_resets}"

    def step(self, action: str) -> StepResult:
        leave = action.removeprefix("leave:")
        if leave == "thread":
            threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
        elif leave == "child":
            Lingering.kept.append(subprocess.Popen(["sleep", "3600"]))
        elif leave == "daemon":  # the shell exits at once; its background sleep is orphaned
            subprocess.run(["sh", "-c", "sleep 3600 &"], check=True)
        elif leave == "file":
            Lingering.kept.append(open(os.devnull))  # noqa: SIM115 - left open on purpose
        elif leave == "cwd":
            os.chdir("/")
        elif leave == "memory":
            Lingering.kept.append(bytearray(16 << 20))
        return super().step(action)


class Tally(AbstractGame):
    """Adds up the numbers it is told: reset(start=n) starts the total at n, step("k") adds k and
    answers the total. Deterministic, so a session replayed elsewhere ends where it was. Actions
    that misbehave: "crash" (os._exit(3)), "spin" (a busy loop), "hang" (sleeps an hour),
    "nap:<seconds>" (sleeps that long, then adds nothing), "doom:<seconds>" (sleeps that long, then
    os._exit(3)). With `moody` every reset starts from
    a random total (a game replay cannot restore)."""

    multi_turn = True

    def __init__(self, moody: bool = False) -> None:
        self.moody = moody

    def get_system_prompt(self) -> str:
        return "Add."

    def get_initial_user_message(self) -> str:
        return "Numbers:"

    def reset(self, *, start: int = 0) -> str:
        self.total = start + (int.from_bytes(os.urandom(4), "big") if self.moody else 0)
        return f"total {self.total}"

    def step(self, action: str) -> StepResult:
        if action == "crash":
            os._exit(3)
        if action == "spin":
            while True:
                pass
        if action == "hang":
            time.sleep(3600)
        if action.startswith("doom:"):
            time.sleep(float(action.removeprefix("doom:")))
            os._exit(3)
        if action.startswith("nap:"):
            time.sleep(float(action.removeprefix("nap:")))
        else:
            self.total += int(action)
        return StepResult(observation=f"total {self.total}", reward=0.0, done=False)


class Strict(AbstractGame):
    """A cut-off reply loses the episode (`on_truncated` overridden); a whole one scores 1."""

    def get_system_prompt(self) -> str:
        return "Answer briefly."

    def get_initial_user_message(self) -> str:
        return ""

    def reset(self) -> str:
        return "go"

    def step(self, action: str) -> StepResult:
        return StepResult(observation="ok", reward=1.0, info={"cut": False})

    def on_truncated(self, action: str, **kwargs: Any) -> StepResult:
        return StepResult(observation=f"cut after {len(action)} chars", reward=-1.0, done=True, info={"cut": True})


class AsyncStrict(AsyncAbstractGame):
    """`Strict` as an async game."""

    def get_system_prompt(self) -> str:
        return "Answer briefly."

    def get_initial_user_message(self) -> str:
        return ""

    async def reset(self) -> str:
        return "go"

    async def step(self, action: str) -> StepResult:
        return StepResult(observation="ok", reward=1.0, info={"cut": False})

    async def on_truncated(self, action: str, **kwargs: Any) -> StepResult:
        return StepResult(observation=f"cut after {len(action)} chars", reward=-1.0, done=True, info={"cut": True})


class AsyncLingering(AsyncAbstractGame):
    """Async: counts resets per game object and per class (what a kept process keeps); the step
    action "leave:task" leaves a task running on the process's loop, "spawn" starts a task that
    counts its turns, "wait" awaits inside `asyncio.timeout` (which needs the current task), and
    the observation reports how many turns the spawned tasks have had."""

    class_resets: ClassVar[int] = 0
    kept: ClassVar[list[Any]] = []
    turns: ClassVar[list[int]] = [0]

    def __init__(self) -> None:
        self.resets = 0

    def get_system_prompt(self) -> str:
        return "async lingering"

    def get_initial_user_message(self) -> str:
        return ""

    async def reset(self, **kwargs: Any) -> str:
        self.resets += 1
        AsyncLingering.class_resets += 1
        return f"object {self.resets} class {AsyncLingering.class_resets}"

    async def step(self, action: str) -> StepResult:
        if action == "leave:task":
            AsyncLingering.kept.append(asyncio.get_running_loop().create_task(asyncio.sleep(3600)))
        elif action == "spawn":
            AsyncLingering.kept.append(asyncio.get_running_loop().create_task(self._count_turns()))
        elif action == "wait":
            async with asyncio.timeout(5):
                await asyncio.sleep(0.05)
        return StepResult(observation=f"turns {AsyncLingering.turns[0]}", reward=1.0, done=False)

    @staticmethod
    async def _count_turns() -> None:
        for _ in range(1000):
            AsyncLingering.turns[0] += 1
            await asyncio.sleep(0.001)


TEST_GAMES = {"echo": Echo, "strict": Strict, "async-strict": AsyncStrict, "tally": Tally, "explode": Explode, "sleepy": Sleepy, "async-sleepy": AsyncSleepy,
              "bad-returns": BadReturns, "seated": Seated, "alternating": Alternating,
              "misbehaving": Misbehaving, "lingering": Lingering,
              "async-lingering": AsyncLingering}


def catalog_with_test_games() -> GameCatalog:
    """The built-ins plus the games above."""
    builtin = GameCatalog.from_setting("none").specs.values()
    specs = [GameSpec.of(name, cls, f"tests.envhost.games:{cls.__name__}")
             for name, cls in TEST_GAMES.items()]
    return GameCatalog([*builtin, *specs])
