"""Shared service core: settings, logging, server bootstrap, Redis keys and the embedded Redis.

Every OpenTinker service builds on these modules so that all five processes start, log,
report health and shut down the same way. Nothing here knows about jobs or training.
"""
