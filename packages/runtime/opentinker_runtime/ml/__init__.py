"""Shared ML library of the Trainer and Rollout services: tokenizer, models, chat rendering,
logprobs, weight packages and checkpoint directories.

Imports torch, transformers and peft (except `sources` and `checkpoints`, which stay light so
settings modules can use them); nothing else in the SDK imports this package. Import the
modules directly (`from opentinker_runtime.ml.models import load_model`): this file imports nothing.
"""
