"""The Lua scripts that make each state change of jobs, events and leases atomic in Redis.

Conventions: times are ms from the scheduler's Clock, passed in ARGV (so tests can move time);
every key a script touches comes in KEYS, built by `opentinker.core.redis_store.Keys`. A job's
event sequence is the `last_event_sequence` field of its hash, incremented in the same script that
XADDs the event with the id `<sequence>-0`, so sequences are dense, ordered and never reused.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio
from redis.commands.core import AsyncScript

# (100 - priority) * 2^40 + submission order: ZRANGE gives priority first, then FIFO.
_QUEUE_SCORE = """
local function queue_score(priority, order)
  return (100 - tonumber(priority)) * 1099511627776 + tonumber(order)
end
"""

SUBMIT = _QUEUE_SCORE + """
-- KEYS: idem, job, events, tenant index, global index, queue, job counter
-- ARGV: spec_hash, job_id, now, idem_ttl_s, priority, event_json, job field pairs...
local found = redis.call('HMGET', KEYS[1], 'job_id', 'spec_hash')
if found[1] then
  if found[2] == ARGV[1] then return {'existing', found[1]} end
  return {'reused', found[1]}
end
local order = redis.call('INCR', KEYS[7])
redis.call('HSET', KEYS[2], 'order', order, 'last_event_sequence', 1, unpack(ARGV, 7))
redis.call('XADD', KEYS[3], '1-0', 'time', ARGV[3], 'data', ARGV[6])
redis.call('ZADD', KEYS[4], order, ARGV[2])
redis.call('ZADD', KEYS[5], order, ARGV[2])
redis.call('ZADD', KEYS[6], queue_score(ARGV[5], order), ARGV[2])
redis.call('HSET', KEYS[1], 'job_id', ARGV[2], 'spec_hash', ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return {'created', ARGV[2]}
"""

TRANSITION = _QUEUE_SCORE + """
-- KEYS: job, events, queue
-- ARGV: now, expected state, new state, event_json, refuse_if_cancel_requested, field pairs...
local cur = redis.call('HGET', KEYS[1], 'state')
if not cur then return {0, ''} end
if cur ~= ARGV[2] then return {0, cur} end
if ARGV[5] == '1' and redis.call('HGET', KEYS[1], 'cancel_requested') == '1' then
  return {0, 'cancel_requested'}
end
redis.call('HSET', KEYS[1], 'state', ARGV[3], 'update_time', ARGV[1], unpack(ARGV, 6))
local seq = redis.call('HINCRBY', KEYS[1], 'last_event_sequence', 1)
redis.call('XADD', KEYS[2], seq .. '-0', 'time', ARGV[1], 'data', ARGV[4])
local job = redis.call('HMGET', KEYS[1], 'job_id', 'priority', 'order')
if ARGV[3] == 'QUEUED' or ARGV[3] == 'ALLOCATING' then
  -- an ALLOCATING job stays in the queue so an interrupted allocation is found and retried
  redis.call('ZADD', KEYS[3], queue_score(job[2], job[3]), job[1])
else
  redis.call('ZREM', KEYS[3], job[1])
end
return {1, seq}
"""

REQUEST_CANCEL = """
-- KEYS: job, events, stopping set
-- ARGV: now, expected state, event_json, worker ids to tell...
local cur = redis.call('HGET', KEYS[1], 'state')
if cur ~= ARGV[2] then return {0, cur or ''} end
if redis.call('HGET', KEYS[1], 'cancel_requested') == '1' then return {2, cur} end
redis.call('HSET', KEYS[1], 'cancel_requested', '1', 'update_time', ARGV[1])
local seq = redis.call('HINCRBY', KEYS[1], 'last_event_sequence', 1)
redis.call('XADD', KEYS[2], seq .. '-0', 'time', ARGV[1], 'data', ARGV[3])
if #ARGV > 3 then redis.call('SADD', KEYS[3], unpack(ARGV, 4)) end
return {1, cur}
"""

APPEND_EVENTS = """
-- KEYS: job, events, idem, lease record, metrics
-- ARGV: now, idem_ttl_s, use_idem, job_id, fencing_token, check_lease, field_pair_count,
--       metric_pair_count, job field pairs..., metric pairs..., event jsons...
if ARGV[3] == '1' then
  local done = redis.call('GET', KEYS[3])
  if done then return {'duplicate', done} end
end
if ARGV[6] == '1' then
  local rec = redis.call('HMGET', KEYS[4], 'job_id', 'fencing_token', 'expire_at')
  if rec[1] ~= ARGV[4] or rec[2] ~= ARGV[5] or tonumber(rec[3]) <= tonumber(ARGV[1]) then
    return {'stale', ''}
  end
end
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing', ''} end
local fields_end = 8 + 2 * tonumber(ARGV[7])
local pairs_end = fields_end + 2 * tonumber(ARGV[8])
if fields_end > 8 then redis.call('HSET', KEYS[1], unpack(ARGV, 9, fields_end)) end
if pairs_end > fields_end then redis.call('HSET', KEYS[5], unpack(ARGV, fields_end + 1, pairs_end)) end
local seq = tonumber(redis.call('HGET', KEYS[1], 'last_event_sequence'))
for i = pairs_end + 1, #ARGV do
  seq = redis.call('HINCRBY', KEYS[1], 'last_event_sequence', 1)
  redis.call('XADD', KEYS[2], seq .. '-0', 'time', ARGV[1], 'data', ARGV[i])
end
if ARGV[3] == '1' then redis.call('SET', KEYS[3], seq, 'EX', ARGV[2]) end
return {'ok', tostring(seq)}
"""

LEASE_ACQUIRE = """
-- KEYS: fencing counter, lease record, job leases, worker leases, expiry, worker, slot keys...
-- ARGV: now, ttl, lease_id, job_id, worker_id, role, slots_json, device_ids_json
local now = tonumber(ARGV[1])
local worker = redis.call('HMGET', KEYS[6], 'expire_at', 'draining')
if not worker[1] or tonumber(worker[1]) <= now or worker[2] == '1' then
  return {'worker_unavailable', ''}
end
for i = 7, #KEYS do
  local held_until = redis.call('HGET', KEYS[i], 'expire_at')
  if held_until and tonumber(held_until) > now then return {'busy', KEYS[i]} end
end
local token = redis.call('INCR', KEYS[1])
local expire = now + tonumber(ARGV[2])
for i = 7, #KEYS do
  redis.call('HSET', KEYS[i], 'lease_id', ARGV[3], 'job_id', ARGV[4], 'expire_at', expire)
end
redis.call('HSET', KEYS[2], 'lease_id', ARGV[3], 'job_id', ARGV[4], 'worker_id', ARGV[5],
           'role', ARGV[6], 'slots', ARGV[7], 'device_ids', ARGV[8], 'fencing_token', token,
           'expire_at', expire)
redis.call('SADD', KEYS[3], ARGV[3])
redis.call('SADD', KEYS[4], ARGV[3])
redis.call('ZADD', KEYS[5], expire, ARGV[3])
return {'ok', tostring(token)}
"""

LEASE_RENEW = """
-- KEYS: lease record, expiry, slot keys...   ARGV: now, ttl, lease_id
local held_until = redis.call('HGET', KEYS[1], 'expire_at')
if not held_until or tonumber(held_until) <= tonumber(ARGV[1]) then return 0 end
local expire = tonumber(ARGV[1]) + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'expire_at', expire)
for i = 3, #KEYS do
  if redis.call('HGET', KEYS[i], 'lease_id') == ARGV[3] then
    redis.call('HSET', KEYS[i], 'expire_at', expire)
  end
end
redis.call('ZADD', KEYS[2], expire, ARGV[3])
return expire
"""

LEASE_RELEASE = """
-- KEYS: lease record, job leases, worker leases, expiry, slot keys...
-- ARGV: lease_id, expired_at_or_before ('' = release whatever the expiry)
local held_until = redis.call('HGET', KEYS[1], 'expire_at')
if held_until and ARGV[2] ~= '' and tonumber(held_until) > tonumber(ARGV[2]) then return -1 end
for i = 5, #KEYS do
  if redis.call('HGET', KEYS[i], 'lease_id') == ARGV[1] then redis.call('DEL', KEYS[i]) end
end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
if held_until then return 1 end
return 0
"""

WORKER_TOUCH = """
-- KEYS: worker, worker index   ARGV: now, ttl, worker_id
local held_until = redis.call('HGET', KEYS[1], 'expire_at')
if not held_until or tonumber(held_until) <= tonumber(ARGV[1]) then return 0 end
local expire = tonumber(ARGV[1]) + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'last_heartbeat', ARGV[1], 'expire_at', expire)
redis.call('ZADD', KEYS[2], expire, ARGV[3])
return 1
"""


@dataclass(frozen=True, kw_only=True)
class Scripts:
    """The scripts registered on one client (EVALSHA, reloaded by redis-py after a flush)."""

    submit: AsyncScript
    transition: AsyncScript
    request_cancel: AsyncScript
    append_events: AsyncScript
    lease_acquire: AsyncScript
    lease_renew: AsyncScript
    lease_release: AsyncScript
    worker_touch: AsyncScript

    @classmethod
    def register(cls, client: redis.asyncio.Redis) -> Scripts:
        sources = {"submit": SUBMIT, "transition": TRANSITION, "request_cancel": REQUEST_CANCEL,
                   "append_events": APPEND_EVENTS, "lease_acquire": LEASE_ACQUIRE,
                   "lease_renew": LEASE_RENEW, "lease_release": LEASE_RELEASE,
                   "worker_touch": WORKER_TOUCH}
        return cls(**{name: client.register_script(text) for name, text in sources.items()})
