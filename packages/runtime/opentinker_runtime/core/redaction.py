"""Keep secrets out of logs and error messages: which keys are secret, and URL passwords."""

from __future__ import annotations

import re

MASK = "***"
SECRET_KEY_WORDS = ("authorization", "api_key", "apikey", "password", "passwd", "secret",
                    "credential")
NOT_SECRET_TOKEN_KEYS = frozenset({"fencing_token", "page_token", "next_page_token",
                                   "bos_token", "eos_token", "pad_token", "unk_token"})
# the lookbehind starts a scheme only where a run of scheme characters starts: without it a long
# run of letters is rescanned from each of its letters (quadratic: 1 MiB logged took hours)
_URL_USERINFO = re.compile(r"(?<![a-zA-Z0-9+.-])(?P<scheme>[a-zA-Z0-9+.-]+://)(?P<userinfo>[^/@\s]+)@")


def is_secret_key(key: str) -> bool:
    """True for keys like Authorization, x-api-key, password, client_secret, token, auth_token.

    Keys ending in `token` are secret except known non-credentials (fencing_token, page_token,
    tokenizer special tokens); plural counts such as `max_tokens` are not secret.
    """
    normalized = key.lower().replace("-", "_")
    if any(word in normalized for word in SECRET_KEY_WORDS):
        return True
    return (normalized == "token" or normalized.endswith("_token")) and (
        normalized not in NOT_SECRET_TOKEN_KEYS)


def mask_url_credentials(text: str) -> str:
    """Replace the user:password part of any URL in `text`: redis://:pw@host -> redis://***@host."""
    return _URL_USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
