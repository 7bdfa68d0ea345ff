"""Tests of the shared ML library `opentinker.ml` (tokenizer, models, chat, logprobs, weights)."""
