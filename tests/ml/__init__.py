"""Tests of the shared ML library `opentinker_runtime.ml` (tokenizer, models, chat, logprobs, weights)."""
