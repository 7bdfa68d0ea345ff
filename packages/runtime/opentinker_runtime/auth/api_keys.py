"""API keys: minted once, stored only salted and hashed in Redis, verified on every call.

A key reads `otk_<key_id>_<secret>`: `key_id` (16 hex digits) is public and names the record
`ot:apikey:<key_id>`; the secret (32 random bytes, URL-safe base64) is shown once, at creation,
and Redis keeps only SHA-256(salt + secret) with a per-key random salt. A high-entropy secret
needs no slow KDF: nobody can brute-force 256 bits, and the salt defeats precomputed tables.

`Principal` is who a verified key speaks for: a tenant, and whether the key is an admin key.
No grpc here: `auth_interceptor` turns this into gRPC metadata checks.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass

import redis.asyncio

from opentinker_api.conventions import KEY_PATTERN, KEY_PREFIX, new_api_key  # noqa: F401 - the key format
from opentinker_runtime.auth.job_tokens import JobTokenVerifier
from opentinker_runtime.core.redis_store import Keys

SYSTEM_TENANT = "system"
"""Tenant of the service key every OpenTinker process shares (OPENTINKER_API_KEY)."""


class InvalidApiKey(ValueError):
    """The text is not an OpenTinker API key (`otk_<16 hex>_<43 characters>`)."""


@dataclass(frozen=True, kw_only=True)
class Principal:
    """Who a verified API key acts for."""

    tenant_id: str
    admin: bool = False
    key_id: str = ""
    job_id: str = ""
    """Set when the call's only credential is a job's token: it acts on that job's things alone."""


@dataclass(frozen=True, kw_only=True)
class ApiKeyRecord:
    """An API key's public part (never its secret)."""

    key_id: str
    tenant_id: str
    admin: bool = False
    description: str = ""
    create_time_ms: int = 0
    revoke_time_ms: int = 0

    @property
    def revoked(self) -> bool:
        return self.revoke_time_ms > 0


def parse_api_key(text: str) -> tuple[str, str]:
    """(key_id, secret) of a key text; InvalidApiKey when it is malformed."""
    match = KEY_PATTERN.match(text.strip())
    if match is None:
        raise InvalidApiKey("not an OpenTinker API key (expected otk_<16 hex digits>_<43 characters>)")
    return match.group(1), match.group(2)


def key_id_of(text: str) -> str:
    """The public id of a key text (safe to log)."""
    return parse_api_key(text)[0]


def hash_secret(salt: bytes, secret: str) -> str:
    return hashlib.sha256(salt + secret.encode()).hexdigest()


def _text(raw: dict[bytes, bytes], name: str) -> str:
    return raw.get(name.encode(), b"").decode()


def decode_record(raw: dict[bytes, bytes]) -> ApiKeyRecord:
    return ApiKeyRecord(key_id=_text(raw, "key_id"), tenant_id=_text(raw, "tenant_id"),
                        admin=_text(raw, "admin") == "1", description=_text(raw, "description"),
                        create_time_ms=int(_text(raw, "create_time") or 0),
                        revoke_time_ms=int(_text(raw, "revoke_time") or 0))


@dataclass(frozen=True, kw_only=True)
class ApiKeyStore:
    """API key records in Redis: `ot:apikey:<key_id>` hashes and a per-tenant index set."""

    client: redis.asyncio.Redis
    keys: Keys = Keys()

    async def create(self, *, tenant_id: str, admin: bool, description: str = "",
                     key_text: str | None = None) -> tuple[ApiKeyRecord, str]:
        """Store a new key (or the given `key_text`, used to install the service key); the record
        and the key text, which is not kept anywhere."""
        text = key_text or new_api_key()
        key_id, secret = parse_api_key(text)
        salt = secrets.token_bytes(16)
        now = int(time.time() * 1000)
        fields = {"key_id": key_id, "tenant_id": tenant_id, "admin": int(admin),
                  "description": description, "create_time": now, "revoke_time": 0,
                  "salt": salt.hex(), "hash": hash_secret(salt, secret)}
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hset(self.keys.api_key(key_id), mapping=fields)
            pipe.sadd(self.keys.tenant_api_keys(tenant_id), key_id)
            await pipe.execute()
        return decode_record({k.encode(): str(v).encode() for k, v in fields.items()}), text

    async def ensure(self, key_text: str, *, tenant_id: str = SYSTEM_TENANT, description: str) -> ApiKeyRecord:
        """Install `key_text` as an admin key unless it is already stored with this secret."""
        if (principal := await self.verify(key_text)) is not None and principal.admin:
            record = await self.get(key_id_of(key_text))
            if record is not None:
                return record
        record, _ = await self.create(tenant_id=tenant_id, admin=True, description=description,
                                      key_text=key_text)
        return record

    async def verify(self, key_text: str) -> Principal | None:
        """Who the key acts for; None when it is malformed, unknown, revoked or wrong."""
        try:
            key_id, secret = parse_api_key(key_text)
        except InvalidApiKey:
            return None
        raw = await self.client.hgetall(self.keys.api_key(key_id))
        if not raw or _text(raw, "revoke_time") not in ("", "0"):
            return None
        expected = _text(raw, "hash")
        actual = hash_secret(bytes.fromhex(_text(raw, "salt")), secret)
        if not hmac.compare_digest(expected, actual):
            return None
        return Principal(tenant_id=_text(raw, "tenant_id"), admin=_text(raw, "admin") == "1", key_id=key_id)

    async def get(self, key_id: str) -> ApiKeyRecord | None:
        raw = await self.client.hgetall(self.keys.api_key(key_id))
        return decode_record(raw) if raw else None

    async def of_tenant(self, tenant_id: str) -> list[ApiKeyRecord]:
        ids = sorted(i.decode() for i in await self.client.smembers(self.keys.tenant_api_keys(tenant_id)))
        records = [await self.get(key_id) for key_id in ids]
        return [r for r in records if r is not None]

    async def revoke(self, key_id: str) -> ApiKeyRecord | None:
        """Mark revoked (kept for audit); None when unknown."""
        record = await self.get(key_id)
        if record is None:
            return None
        if not record.revoked:
            await self.client.hset(self.keys.api_key(key_id), "revoke_time", int(time.time() * 1000))
        return await self.get(key_id)


class CachingVerifier:
    """`ApiKeyStore.verify` with a short in-process cache of positive answers.

    Every RPC is authenticated; the cache keeps that from costing a Redis read per call. A revoked
    key stops working within `ttl_seconds`. Entries are keyed by a hash of the key text.
    `job_tokens` checks job tokens on the same Redis with the same cache time (the AuthInterceptor
    given this verifier's `verify` uses it)."""

    def __init__(self, store: ApiKeyStore, *, ttl_seconds: float = 5.0, max_entries: int = 10_000) -> None:
        self.store = store
        self.ttl = ttl_seconds
        self.max_entries = max_entries
        self._cache: dict[str, tuple[float, Principal]] = {}
        self.job_tokens = JobTokenVerifier(store.client, keys=store.keys, ttl_seconds=ttl_seconds,
                                           max_entries=max_entries)

    async def verify(self, key_text: str) -> Principal | None:
        digest = hashlib.sha256(key_text.encode()).hexdigest()
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        principal = await self.store.verify(key_text)
        if principal is not None:
            if len(self._cache) >= self.max_entries:
                self._evict(now)
            self._cache[digest] = (now + self.ttl, principal)
        return principal

    def _evict(self, now: float) -> None:
        for digest in [d for d, (until, _) in self._cache.items() if until <= now] or list(self._cache)[:1]:
            del self._cache[digest]


def bearer_token(metadata: Iterable[tuple[str, str | bytes]]) -> str | None:
    """The token of an `authorization: Bearer <token>` metadata entry, if any."""
    for name, value in metadata:
        if name.lower() == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None
