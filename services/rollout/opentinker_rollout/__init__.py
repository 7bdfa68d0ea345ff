"""OpenTinker Rollout service: the inference engine and the agent-loop state machine.

Run it with `python -m opentinker_rollout`; settings come from OPENTINKER_ROLLOUT_* variables
(see docs/settings.md).
"""
