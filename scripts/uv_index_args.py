"""Print, one per line, the uv arguments that make `uv pip install` read the same package
sources as this machine's pip: its find-links, extra index URLs, index URL and constraints
(from `pip config list`, i.e. pip.conf files and PIP_* variables). Used by scripts/setup.sh."""

from __future__ import annotations

import shlex
import subprocess
import sys

OPTIONS = {"find-links": "--find-links", "extra-index-url": "--extra-index-url", "index-url": "--index-url",
           "constraint": "--constraint"}


def pip_config() -> dict[str, list[str]]:
    """{option: values} of `pip config list` (later scopes override earlier ones, as pip reads them)."""
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    found: dict[str, list[str]] = {}
    for line in listing.stdout.splitlines():
        key, _, value = line.partition("=")
        option = key.rpartition(".")[2]
        if option in OPTIONS:
            found[option] = shlex.split(shlex.split(value)[0]) if value else []
    return found


def uv_args(config: dict[str, list[str]]) -> list[str]:
    args = []
    for option, values in config.items():
        for value in values:
            args += [OPTIONS[option], value]
    if "extra-index-url" in config or "find-links" in config:
        args += ["--index-strategy", "unsafe-best-match"]  # pip's rule: the best version from any source
    return args


if __name__ == "__main__":
    print("\n".join(uv_args(pip_config())))
