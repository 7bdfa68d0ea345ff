"""Read a Markdown tutorial's fenced blocks and say what each one is for.

Info strings (the word after the opening fence):
    python file=NAME, yaml file=NAME, ...   the file NAME, written where the terminal is
    bash                                    commands typed into the terminal, in order
    output                                  exactly what the bash block before it prints
    text                                    illustrative output, not checked
Any other info string is an error: every block of code in the tutorial is run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
FILE_INFO = re.compile(r"^\w+ file=(?P<path>[\w./-]+)$")
PLAIN_KINDS = ("bash", "output", "text")


class TutorialFormatError(ValueError):
    """A block the test cannot run or check."""


@dataclass(frozen=True, kw_only=True)
class Block:
    kind: str
    """"file", "bash", "output" or "text"."""
    body: str
    path: str = ""
    """For a file block: the file's name, relative to the terminal's directory."""
    expected_output: str | None = None
    """For a bash block followed by an output block: what it must print (stdout)."""


def parse_blocks(markdown: str) -> list[Block]:
    """The tutorial's blocks in order; an output block is attached to the bash block before it."""
    blocks: list[Block] = []
    for match in FENCE.finditer(markdown):
        info, body = match.group(1).strip(), match.group(2)
        if info == "output":
            blocks[-1] = _with_output(blocks, body)
        elif info in PLAIN_KINDS:
            blocks.append(Block(kind=info, body=body))
        elif file_match := FILE_INFO.match(info):
            blocks.append(Block(kind="file", body=body, path=file_match.group("path")))
        else:
            raise TutorialFormatError(f"block with info string {info!r}: expected one of "
                                      f"{', '.join(PLAIN_KINDS)} or '<language> file=NAME'")
    return blocks


def _with_output(blocks: list[Block], body: str) -> Block:
    if not blocks or blocks[-1].kind != "bash":
        raise TutorialFormatError("an output block must follow a bash block")
    previous = blocks[-1]
    return Block(kind="bash", body=previous.body, expected_output=body)


def write_file(block: Block, directory: Path) -> Path:
    path = directory / block.path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(block.body)
    return path
