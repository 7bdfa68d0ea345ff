"""What a Tinker call can fail with: an HTTP status and a category the SDK understands.

`category` is Tinker's RequestErrorCategory: "user" (the request is wrong: the SDK raises at once),
"server" (our fault or a lost worker) or "unknown".
"""

from __future__ import annotations


class GatewayError(Exception):
    status = 500
    category = "server"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(GatewayError):
    """The request is malformed or names something invalid (HTTP 400)."""

    status = 400
    category = "user"


class Unauthorized(GatewayError):
    """No key, or a key that is not valid (HTTP 401)."""

    status = 401
    category = "user"


class NotFound(GatewayError):
    """Unknown to this tenant: never tells another tenant's things from missing ones (HTTP 404)."""

    status = 404
    category = "user"


class Conflict(GatewayError):
    """The thing exists already, or the model is in a state that refuses the call (HTTP 409)."""

    status = 409
    category = "user"


class Unavailable(GatewayError):
    """A worker or the Scheduler cannot be reached now (HTTP 503: the SDK retries)."""

    status = 503
    category = "server"
