"""OpenTinker EnvHost service: live environment sessions built from user AbstractGame classes.

Run it with `python -m opentinker_envhost`; settings come from OPENTINKER_ENVHOST_* variables
(see docs/settings.md).
"""
