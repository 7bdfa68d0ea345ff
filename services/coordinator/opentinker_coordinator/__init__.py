"""OpenTinker Coordinator service: the job driver: phases, barriers and multi-agent turn-taking.

Run it with `python -m opentinker_coordinator`; settings come from OPENTINKER_COORDINATOR_* variables
(see docs/settings.md).
"""
