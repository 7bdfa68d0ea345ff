"""Which handler serves a method and path; path parameters come out URL-decoded."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

JOB = r"/api/jobs/(?P<job_id>[^/]+)"
ROUTES: tuple[tuple[str, str, str], ...] = (
    ("GET", r"/healthz", "healthz"),
    ("GET", r"/api/jobs", "list_jobs"),
    ("GET", JOB, "get_job"),
    ("GET", JOB + r"/metrics", "job_metrics"),
    ("GET", JOB + r"/events", "job_events"),
    ("GET", JOB + r"/samples", "job_samples"),
    ("GET", JOB + r"/artifacts", "job_artifacts"),
    ("GET", r"/api/artifacts/download", "download_artifact"),
    ("POST", JOB + r"/cancel", "cancel_job"),
    ("GET", r"/api/workers", "list_workers"),
    ("GET", r"/api/tenants", "list_tenants"),
    ("GET", r"/static/(?P<name>[A-Za-z0-9_-]+\.(?:html|js|css))", "static_file"),
    # the page's own paths: the script reads location.pathname and shows that view
    ("GET", r"/|/jobs|/jobs/[^/]+|/workers|/tenants", "page"),
)
COMPILED = tuple((method, re.compile(pattern), name) for method, pattern, name in ROUTES)


@dataclass(frozen=True)
class Match:
    handler: str
    params: dict[str, str]


class MethodNotAllowed(Exception):
    def __init__(self, allowed: list[str]) -> None:
        super().__init__(", ".join(allowed))
        self.allowed = allowed


def resolve(method: str, path: str) -> Match | None:
    """The route for (method, path); None when no route has the path; MethodNotAllowed when
    routes have the path but not the method."""
    allowed = []
    for route_method, pattern, name in COMPILED:
        found = pattern.fullmatch(path)
        if found is None:
            continue
        if route_method == method:
            return Match(name, {key: unquote(value) for key, value in found.groupdict().items()})
        allowed.append(route_method)
    if allowed:
        raise MethodNotAllowed(sorted(set(allowed)))
    return None
