"""Adapters to the other services: the gRPC implementations of the driver's ports (Trainer,
Rollout, weight sync, Scheduler reports), EnvHost resolution, job paths and call retries.
"""
