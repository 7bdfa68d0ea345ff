"""Conventions of the wire that the .proto files cannot say, shared by every side (any language
must follow them; hand-written, kept beside the generated stubs).

- Errors carry machine-readable details in trailing metadata: `opentinker-reason` holds the
  common.v1.ErrorReason value name, `opentinker-traceback-bin` a user game's traceback (UTF-8).
- API keys read `otk_<key_id>_<secret>`: 16 hex digits of public id, 43 URL-safe base64
  characters of secret (32 random bytes); callers send them as `authorization: Bearer <key>`.
"""

from __future__ import annotations

import base64
import re
import secrets

REASON_METADATA_KEY = "opentinker-reason"
TRACEBACK_METADATA_KEY = "opentinker-traceback-bin"
KEY_PREFIX = "otk"
KEY_PATTERN = re.compile(r"^otk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")


def metadata_text(metadata, key: str) -> str:  # noqa: ANN001 - grpc trailing metadata (pairs)
    """The text value of `key` in gRPC (trailing) metadata pairs ("" if absent)."""
    for name, value in metadata or ():
        if name == key:
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return ""


def reason_from_metadata(metadata) -> str:  # noqa: ANN001 - grpc trailing metadata (pairs); no grpc import
    """The ErrorReason name an error carries ("" if none), e.g. "ERROR_REASON_AGENT_LOST"."""
    return metadata_text(metadata, REASON_METADATA_KEY)


def traceback_from_metadata(metadata) -> str:  # noqa: ANN001 - grpc trailing metadata (pairs); no grpc import
    """A user game's traceback from an error's trailing metadata ("" if it carries none)."""
    return metadata_text(metadata, TRACEBACK_METADATA_KEY)


def new_api_key() -> str:
    """A fresh key text; only its holder ever sees it in full."""
    secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    return f"{KEY_PREFIX}_{secrets.token_hex(8)}_{secret}"
