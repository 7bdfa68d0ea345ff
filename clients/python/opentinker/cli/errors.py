"""Failures the CLI reports as one message and an exit code."""


class StackError(Exception):
    exit_code = 1


class PortInUse(StackError):
    """A port is taken or given twice; nothing was started."""

    exit_code = 2


class AlreadyRunning(StackError):
    """The state directory already has a live stack."""


class StartFailed(StackError):
    """A process exited or was not SERVING in time; everything started was stopped."""

    def __init__(self, message: str, log_tails: dict[str, str]):
        super().__init__(message)
        self.log_tails = log_tails
        """Last log lines of each process that failed, by name."""
