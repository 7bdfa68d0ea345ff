"""Page sizes and opaque page tokens shared by the List RPCs."""

from __future__ import annotations

import base64
import binascii

from opentinker_scheduler.errors import InvalidArgument

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000


def page_size(requested: int) -> int:
    """0 means the default (50); otherwise 1..1000."""
    if requested == 0:
        return DEFAULT_PAGE_SIZE
    if not 1 <= requested <= MAX_PAGE_SIZE:
        raise InvalidArgument("page_size", f"must be between 1 and {MAX_PAGE_SIZE} (0 = "
                              f"{DEFAULT_PAGE_SIZE}), got {requested}")
    return requested


def encode_token(kind: str, position: str) -> str:
    """An opaque token naming where the next page starts (clients must not parse it)."""
    return base64.urlsafe_b64encode(f"{kind}:v1:{position}".encode()).decode()


def decode_token(kind: str, token: str) -> str | None:
    """The position inside `token`, None for an empty token; InvalidArgument when it is not ours."""
    if not token:
        return None
    try:
        found_kind, version, position = base64.urlsafe_b64decode(token.encode()).decode().split(":", 2)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        found_kind = version = position = ""
    if found_kind != kind or version != "v1" or not position:
        raise InvalidArgument("page_token", "is not a next_page_token returned by this List call")
    return position


def decode_offset(kind: str, token: str) -> int:
    """The non-negative integer inside `token` (0 for an empty token); InvalidArgument otherwise."""
    position = decode_token(kind, token)
    if position is None:
        return 0
    if not position.isdigit():
        raise InvalidArgument("page_token", "is not a next_page_token returned by this List call")
    return int(position)
