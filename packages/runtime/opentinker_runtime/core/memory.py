"""Keep freed heap memory in the process instead of handing it back to the OS at once.

Services that move whole models (Trainer exports, Rollout weight updates) allocate and free
many megabyte-sized buffers per transfer. glibc serves each from fresh mmap'd pages and
unmaps it on free, so every transfer pays page faults on all of its bytes again (measured:
building 117 one-MiB ExportWeights messages took 310-380 ms, 31-35 ms with the thresholds
below). The price: up to `trim_threshold` bytes of freed memory stay with the process.
"""

from __future__ import annotations

import ctypes
import ctypes.util

import structlog

log = structlog.get_logger(__name__)

M_TRIM_THRESHOLD = -1  # glibc mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc's own upper bound for the dynamic threshold
TRIM_THRESHOLD_BYTES = 1024 * 1024 * 1024


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds; False (and nothing changed) off glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and \
        bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    log.debug("malloc_thresholds", applied=applied, mmap_threshold=MMAP_THRESHOLD_BYTES,
              trim_threshold=TRIM_THRESHOLD_BYTES)
    return applied
