"""What the doc generators (gen_settings_docs.py, gen_job_spec_docs.py) share: table cells and
the write-or-check command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def markdown_cell(text: str) -> str:
    """`text` as one Markdown table cell (pipes escaped, on one line)."""
    return text.replace("|", "\\|").replace("\n", " ")


def write_or_check(argv: Sequence[str] | None, *, description: str, doc_path: Path,
                   render: Callable[[], str], script: str) -> int:
    """`script [--check]`: rewrite doc_path with render(), or exit 1 when it is stale."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help=f"fail if {doc_path.name} is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not doc_path.exists() or doc_path.read_text() != text:
            print(f"{doc_path} is stale: run python scripts/{script}", file=sys.stderr)
            return 1
        return 0
    doc_path.write_text(text)
    print(f"wrote {doc_path}")
    return 0
