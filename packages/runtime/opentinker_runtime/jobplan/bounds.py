"""The limits a JobSpec's values must keep (defaults are in `defaults`)."""

from __future__ import annotations

import re

MAX_PRIORITY = 100
MAX_TOTAL_STEPS = 10_000_000
MAX_BATCH_SIZE = 4096
MAX_GROUP_SIZE = 1024
MAX_DEVICES_PER_REQUEST = 64
MAX_RETRIES = 100
MAX_STALENESS = 8
"""spec.async.max_staleness: policy versions the Rollout may run ahead."""
MAX_LORA_RANK = 1024
"""The Trainer's and Rollout's bound too: a larger adapter is gigabytes per layer, allocated at once."""
MAX_LABELS = 32
MAX_LABEL_VALUE = 256
MAX_DISPLAY_NAME = 200
LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
UPPER_BOUNDS = {"top_p": 1.0, "dropout": 1.0, "beta1": 1.0, "beta2": 1.0, "gamma": 1.0, "rank": MAX_LORA_RANK}
"""Numeric fields named so must not exceed the bound, wherever they are (AdamW's betas < 1 and
LoRA dropout < 1 are checked where they are resolved)."""
