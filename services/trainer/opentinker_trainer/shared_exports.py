"""The Trainer's exports through shared memory: which file each session has waiting.

At most one file per session lives at a time: a session's next export (by either transport)
and its release delete the previous one. The receiver deletes a file once it read it; a file
nobody read (the receiver was on another host, the call was cancelled) goes at the session's
next export, its release, after `max_age_s`, or with the writer's directory when the Trainer
stops or, after a crash, starts again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import structlog
import torch

from opentinker_runtime.ml.shared_weights import SharedWeightsWriter, WrittenWeights

log = structlog.get_logger(__name__)
DEFAULT_MAX_AGE_S = 600.0


class SharedExports:
    """Export files of this Trainer's sessions; disabled (None from `write`) without a root."""

    def __init__(self, root: Path | None, *, max_age_s: float = DEFAULT_MAX_AGE_S) -> None:
        self.writer = SharedWeightsWriter(root) if root else None
        self.max_age_s = max_age_s
        self._by_session: dict[str, str] = {}
        self._lock = threading.Lock()

    def open(self) -> None:
        """Create this Trainer's directory (removing those of dead Trainers); on an OSError the
        Trainer streams instead."""
        if self.writer is None:
            return
        try:
            self.writer.open()
        except OSError as error:
            log.warning("shared_weights_disabled", root=str(self.writer.root), error=str(error))
            self.writer = None

    def write(self, session_id: str, state_dict: Mapping[str, torch.Tensor]) -> WrittenWeights | None:
        """Replace the session's file by one holding `state_dict`; None when shared memory is off
        or full (the caller streams instead)."""
        if self.writer is None:
            return None
        self.forget(session_id)
        self.sweep()
        try:
            written = self.writer.write(state_dict)
        except OSError as error:  # e.g. /dev/shm full: the stream still works
            log.warning("shared_weights_write_failed", session_id=session_id, error=str(error))
            return None
        with self._lock:
            self._by_session[session_id] = written.file.name
        return written

    def forget(self, session_id: str) -> None:
        """Delete the session's waiting file, if any."""
        with self._lock:
            name = self._by_session.pop(session_id, None)
        if name and self.writer is not None:
            self.writer.remove(name)

    def sweep(self) -> list[str]:
        """Delete files older than max_age_s (nobody is going to read them)."""
        if self.writer is None:
            return []
        removed = self.writer.remove_older_than(self.max_age_s)
        if removed:
            log.info("shared_weights_expired", files=len(removed))
        return removed

    def forget_closed(self, is_open: Callable[[str], bool]) -> None:
        """Delete the waiting files of sessions that are no longer open."""
        with self._lock:
            closed = [session_id for session_id in self._by_session if not is_open(session_id)]
        for session_id in closed:
            self.forget(session_id)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
