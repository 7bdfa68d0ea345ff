"""OpenTinker Scheduler service: jobs, tenants, API keys, the worker pool and device leases (state in Redis).

Run it with `python -m opentinker_scheduler`; settings come from OPENTINKER_SCHEDULER_* variables
(see docs/settings.md).
"""
