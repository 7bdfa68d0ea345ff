"""The machinery test_tutorial.py runs the tutorial with: block parsing and the terminal."""

from __future__ import annotations

import os
import signal
import time

import pytest

from harness.stack import pid_running
from tests.docs.tutorial_blocks import TutorialFormatError, parse_blocks
from tests.docs.tutorial_terminal import Terminal

PAGE = """Intro.

```python file=pkg/game.py
print("hi")
```

```bash
python pkg/game.py
```

```output
hi
```

```text
illustrative
```
"""


def test_blocks_come_in_order_with_their_kind_file_and_expected_output() -> None:
    blocks = parse_blocks(PAGE)
    assert [(b.kind, b.path) for b in blocks] == [("file", "pkg/game.py"), ("bash", ""), ("text", "")]
    assert blocks[0].body == 'print("hi")\n'
    assert blocks[1].body == "python pkg/game.py\n" and blocks[1].expected_output == "hi\n"


@pytest.mark.parametrize("page, problem", [
    ("```python\nx = 1\n```\n", "info string 'python'"),
    ("```text\nx\n```\n\n```output\nx\n```\n", "must follow a bash block"),
])
def test_blocks_the_test_cannot_run_are_refused(page: str, problem: str) -> None:
    with pytest.raises(TutorialFormatError, match=problem):
        parse_blocks(page)


def test_the_terminal_keeps_variables_and_directory_between_blocks(tmp_path) -> None:
    terminal = Terminal(tmp_path, dict(os.environ), tmp_path)
    first = terminal.run("mkdir -p work && cd work\nNAME=buzzer\nexport PORT=5", timeout=10)
    second = terminal.run('echo "$NAME $PORT $(pwd)"', timeout=10)
    assert first.returncode == 0 and second.stdout == f"buzzer 5 {tmp_path / 'work'}\n"
    failed = terminal.run("false\necho not reached", timeout=10)
    assert failed.returncode == 1 and failed.stdout == ""


def test_kill_leftovers_stops_what_a_block_left_in_the_background(tmp_path) -> None:
    """Even a process that ignores SIGTERM (it gets SIGKILL after the grace)."""
    terminal = Terminal(tmp_path, dict(os.environ), tmp_path)
    terminal.run("trap '' TERM; sleep 60 > /dev/null 2>&1 &\necho $! > sleeper.pid", timeout=10)
    sleeper = int((tmp_path / "sleeper.pid").read_text())
    try:
        assert pid_running(sleeper)
        terminal.kill_leftovers(grace=0.5)
        deadline = time.monotonic() + 5
        while pid_running(sleeper) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_running(sleeper)
    finally:
        if pid_running(sleeper):
            os.kill(sleeper, signal.SIGKILL)
