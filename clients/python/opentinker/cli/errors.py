"""Failures the CLI reports as one message and an exit code."""


class StackError(Exception):
    exit_code = 1


class PortInUse(StackError):
    """A port is taken or given twice; nothing was started."""

    exit_code = 2


class StartFailed(StackError):
    """A process exited or was not SERVING in time; everything started was stopped."""

    def __init__(self, message: str, log_tails: dict[str, str]):
        super().__init__(message)
        self.log_tails = log_tails
        """Last log lines of each process that failed, by name."""


class NoStack(StackError):
    """The state directory records no stack (`restart` has nothing to restart)."""

    exit_code = 3


class NotRestartable(StackError):
    """A process recorded by an older opentinker, without the environment to start it again."""
