"""`StackPool`: local stacks keyed by `StackSpec`, so equal specs share one stack.

A stack costs ~17 s to start and stop on a quiet 2-core machine (~30 s on a busy one). The pool starts a spec's stack on
first use and hands the same stack to every later request of an equal spec, whichever test
directory it comes from; `close()` stops every stack it started (the test session's end).

Three ways to ask:

* `lease(spec)`, a context manager (a fixture yields inside it): the shared stack of `spec`. A
  stack nobody leases stays up for the next lease of its spec; of those idle stacks the pool
  keeps the `idle_limit` most recently used running and stops the others (memory: each stack
  is five Python processes, two of them with torch).
* `get(spec)`: the same shared stack, kept running until `close()`.
* `private(spec)`, a context manager: a stack of the caller's own, stopped at its exit. For
  tests that kill or restart services, add processes to the stack, or read counts that only a
  fresh stack has (a worker's log, an EnvHost's error counters).

Tests on a shared stack must not depend on what others left there: each makes its own tenants
(names no other test uses) and jobs, and reads only those. A shared stack found with a process
gone (a test killed it or it crashed) is replaced by a fresh one with a `StackReplacedWarning`
when nobody holds it, and is an error when somebody does.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from harness.stack import LocalStack
from harness.stack_spec import DEFAULT, StackSpec


class StackReplacedWarning(UserWarning):
    """A shared stack had lost a process and was replaced by a fresh one."""


class StackPool:
    """Stacks by spec; `make_dir(name)` gives each stack a new state directory (pytest's
    `tmp_path_factory.mktemp`, or `tempfile.mkdtemp` wrapped for a bench); `stack_class` makes a
    stack of a spec (a fake in the pool's own tests)."""

    def __init__(self, make_dir: Callable[[str], Path], *, idle_limit: int = 1, up_timeout: float = 120,
                 stack_class: Callable[[Path, StackSpec], LocalStack] = LocalStack) -> None:
        self.make_dir = make_dir
        self.stack_class = stack_class
        self.idle_limit = idle_limit
        self.up_timeout = up_timeout
        self.stacks: dict[StackSpec, LocalStack] = {}
        self.users: Counter[StackSpec] = Counter()
        self.pinned: set[StackSpec] = set()
        self.idle: list[StackSpec] = []
        """Shared stacks nobody leases now, least recently used first."""
        self.failed: dict[StackSpec, str] = {}
        self.started: list[tuple[StackSpec, str]] = []
        """(spec, "shared" or "private") of every stack this pool started, in order."""
        self.private_stacks: list[LocalStack] = []

    def get(self, spec: StackSpec = DEFAULT) -> LocalStack:
        """The shared stack of `spec`, kept running until `close()`."""
        stack = self._acquire(spec)
        self.pinned.add(spec)
        self.users[spec] -= 1
        return stack

    @contextlib.contextmanager
    def lease(self, spec: StackSpec = DEFAULT) -> Iterator[LocalStack]:
        """The shared stack of `spec` for the `with` block."""
        stack = self._acquire(spec)
        try:
            yield stack
        finally:
            self.users[spec] -= 1
            if self.users[spec] == 0 and spec not in self.pinned:
                self.idle.append(spec)
                self._trim_idle()

    @contextlib.contextmanager
    def private(self, spec: StackSpec = DEFAULT, *, name: str = "private") -> Iterator[LocalStack]:
        """A stack of `spec` for the caller alone, started now and stopped at the block's end."""
        stack = self.stack_class(self.make_dir(f"{name}-stack"), spec)
        self.started.append((spec, "private"))
        self.private_stacks.append(stack)
        try:
            stack.up(self.up_timeout)
            yield stack
        finally:
            stack.down()
            self.private_stacks.remove(stack)

    def close(self) -> None:
        """Stop every stack the pool still runs."""
        for stack in [*self.stacks.values(), *self.private_stacks]:
            stack.down()
        self.stacks.clear()
        self.private_stacks.clear()
        self.idle.clear()

    def _acquire(self, spec: StackSpec) -> LocalStack:
        if spec in self.failed:
            raise RuntimeError(f"the {spec.name} stack ({spec}) failed to start earlier:\n{self.failed[spec]}")
        if spec in self.idle:
            self.idle.remove(spec)
        stack = self.stacks.get(spec)
        if stack is not None and (gone := stack.gone()):
            if self.users[spec] or spec in self.pinned:  # others hold it: replacing would leave them a dead one
                raise RuntimeError(f"the shared {spec.name} stack in {stack.state_dir} lost {', '.join(gone)} "
                                   f"while in use: a test killed it or it crashed (its logs are there)")
            warnings.warn(StackReplacedWarning(
                f"the shared {spec.name} stack in {stack.state_dir} lost {', '.join(gone)}: a test before this one "
                f"killed it or it crashed (its logs are there); starting a fresh one"), stacklevel=3)
            self._stop(spec)
            stack = None
        if stack is None:
            stack = self._start(spec)
        self.users[spec] += 1
        return stack

    def _start(self, spec: StackSpec) -> LocalStack:
        stack = self.stack_class(self.make_dir(f"{spec.name}-stack"), spec)
        self.started.append((spec, "shared"))
        try:
            stack.up(self.up_timeout)
        except BaseException as error:
            stack.down()
            self.failed[spec] = str(error)
            raise
        self.stacks[spec] = stack
        return stack

    def _trim_idle(self) -> None:
        while len(self.idle) > self.idle_limit:
            self._stop(self.idle.pop(0))

    def _stop(self, spec: StackSpec) -> None:
        stack = self.stacks.pop(spec)
        if spec in self.idle:
            self.idle.remove(spec)
        stack.down()
