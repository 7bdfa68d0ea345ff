"""Checks on a request before anything is called: whose key, which host, which origin.

A dashboard started with a key lends it to every request without one, so while it listens on a
loopback address it answers only Host names of that loopback (a web page that rebinds its own
DNS name to 127.0.0.1 is refused), and a POST must be JSON from the page's own origin (a form
on another site cannot cancel jobs).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from opentinker.dashboard.errors import ApiError, forbidden

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def caller_key(authorization: str | None, default_key: str) -> str:
    """The key of `Authorization: Bearer <key>`, else the dashboard's own key ("" for none)."""
    if authorization is None or authorization.strip() == "":
        return default_key
    scheme, _, key = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise ApiError("UNAUTHENTICATED", "the Authorization header must be 'Bearer <api key>'")
    return key.strip()


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(host_header: str) -> str:
    """`example.com:8080` -> `example.com`, `[::1]:8080` -> `::1`."""
    return (urlsplit(f"//{host_header}").hostname or "").lower()


def check_host(host_header: str | None, bind_host: str) -> None:
    if not is_loopback(bind_host):
        return
    name = host_name(host_header or "")
    if not is_loopback(name):
        raise forbidden(f"this dashboard listens on {bind_host} and answers only loopback host "
                        f"names (localhost, 127.0.0.1), not {name or 'a request without Host'}")


def check_post(origin: str | None, host_header: str | None, content_type: str | None) -> None:
    if origin and origin not in {f"http://{host_header}", f"https://{host_header}"}:
        raise forbidden(f"cross-origin request from {origin} refused")
    if (content_type or "").split(";")[0].strip().lower() != "application/json":
        raise ApiError("INVALID_ARGUMENT", "a POST must have Content-Type: application/json")
