"""The web dashboard: a small HTTP server that is a client of the Scheduler's gRPC API.

    python -m opentinker.dashboard --scheduler 127.0.0.1:50051 --port 8080
    # or: opentinker dashboard --scheduler 127.0.0.1:50051 --port 8080

It serves a single page (static/: vanilla JS, no build step, nothing from a CDN) and a JSON API
that reads the same gRPC methods the SDK and CLI use:

    GET  /api/jobs                 ListJobs (newest first; ?page_size=&page_token=)
    GET  /api/jobs/<id>            GetJob
    GET  /api/jobs/<id>/metrics    every MetricsReported event so far, as series per metric
    GET  /api/jobs/<id>/events     Server-Sent Events, live from WatchJob (Last-Event-ID resumes)
    POST /api/jobs/<id>/cancel     CancelJob
    GET  /api/workers              ListWorkers: devices and leases (admin keys)
    GET  /api/tenants              ListTenants: usage against quota (admin keys)
    GET  /healthz                  the dashboard process itself

A gRPC error becomes an HTTP status with a JSON body {"code": "NOT_FOUND", "message": ...}.

Keys: a request's `Authorization: Bearer <key>` is forwarded to the Scheduler; a request without
one uses the key the dashboard was started with (OPENTINKER_API_KEY, OPENTINKER_API_KEY_FILE or
the local stack's .opentinker/admin.key). So a dashboard started with an admin key lends that
key's powers (cancel any job, list tenants) to everyone who can reach its port: it binds
127.0.0.1 by default, refuses requests whose Host header is not a loopback name while bound to
loopback (DNS rebinding), and refuses cross-site POSTs. Bind another address only on a host
where everyone who can reach it may hold that key, or start it without one (no
OPENTINKER_API_KEY or OPENTINKER_API_KEY_FILE, no ./.opentinker/admin.key) so that each user
pastes their own key into the page (kept in the browser's localStorage).
"""
