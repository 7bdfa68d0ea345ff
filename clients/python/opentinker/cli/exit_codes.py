"""What `opentinker` exits with, so scripts can tell failures apart (docs: README "CLI").

    0    success (for `run` / `watch`: the job SUCCEEDED; for `status`: everything SERVING)
    1    the job ended FAILED or CANCELLED, the stack is unhealthy, or the server failed (INTERNAL)
    2    bad input: usage, an invalid job spec (file:line:column), INVALID_ARGUMENT
    3    nothing to talk to: the scheduler is unreachable (UNAVAILABLE), or no local stack recorded
    4    refused: UNAUTHENTICATED, PERMISSION_DENIED, RESOURCE_EXHAUSTED (a quota)
    5    not found (NOT_FOUND): no such job, tenant or key
    6    conflict: FAILED_PRECONDITION, ALREADY_EXISTS, ABORTED (e.g. cancelling a finished job)
    130  interrupted (Ctrl-C)
"""

OK = 0
FAILED = 1
BAD_INPUT = 2
UNREACHABLE = 3
REFUSED = 4
NOT_FOUND = 5
CONFLICT = 6
INTERRUPTED = 130

_BY_STATUS = {
    "INVALID_ARGUMENT": BAD_INPUT, "OUT_OF_RANGE": BAD_INPUT,
    "UNAVAILABLE": UNREACHABLE, "DEADLINE_EXCEEDED": UNREACHABLE,
    "UNAUTHENTICATED": REFUSED, "PERMISSION_DENIED": REFUSED, "RESOURCE_EXHAUSTED": REFUSED,
    "NOT_FOUND": NOT_FOUND,
    "FAILED_PRECONDITION": CONFLICT, "ALREADY_EXISTS": CONFLICT, "ABORTED": CONFLICT,
}


def for_status(code: str) -> int:
    """The exit code for a gRPC status code name."""
    return _BY_STATUS.get(code, FAILED)
