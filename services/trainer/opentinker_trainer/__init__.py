"""OpenTinker Trainer service: per-job policy weights, optimizer state, reference policy and checkpoints.

Run it with `python -m opentinker_trainer`; settings come from OPENTINKER_TRAINER_* variables
(see docs/settings.md).
"""
