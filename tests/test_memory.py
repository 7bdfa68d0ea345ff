"""keep_freed_memory: glibc's thresholds are raised so freed megabyte buffers are reused."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

PROBE = textwrap.dedent('''
    import ctypes, ctypes.util, sys
    from opentinker_runtime.core.memory import keep_freed_memory
    libc = ctypes.CDLL(ctypes.util.find_library("c"))

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                     "uordblks", "fordblks", "keepcost")]

    libc.mallinfo2.restype = Mallinfo2
    applied = keep_freed_memory() if sys.argv[1] == "keep" else False
    before = libc.mallinfo2().hblks
    buffers = [bytearray(4 * 1024 * 1024) for _ in range(8)]
    print(applied, libc.mallinfo2().hblks - before)  # of the 8 buffers, how many are mmap'd
''')


def probe(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                         check=True, env={**os.environ, "OPENTINKER_LOG_LEVEL": "warning"})
    applied, mmapped = out.stdout.split()[-2:]
    return applied, int(mmapped)


def test_megabyte_buffers_come_from_the_heap_once_the_thresholds_are_raised() -> None:
    assert probe("default") == ("False", 8)  # glibc's default: each 4 MiB buffer is an mmap
    assert probe("keep") == ("True", 0)
