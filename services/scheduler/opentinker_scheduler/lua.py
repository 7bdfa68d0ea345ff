"""The Lua scripts that make each state change of jobs, events and leases atomic in Redis.

Conventions: times are ms from the scheduler's Clock, passed in ARGV (so tests can move time);
every key a script touches comes in KEYS, built by `opentinker_runtime.core.redis_store.Keys`. A job's
event sequence is the `last_event_sequence` field of its hash, incremented in the same script that
XADDs the event with the id `<sequence>-0`, so sequences are dense, ordered and never reused.
A job's stream keeps its last MAX_EVENTS events (`SchedulerConfig.max_events_per_job`, put into
every script's text at registration): older ones are trimmed as new ones arrive.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio
from redis.commands.core import AsyncScript

# Aged priority: a job counts as submitted `priority * aging_ms` earlier than it was, so higher
# priorities go first, FIFO within a priority, and a job that waited `aging_ms` longer than
# another has caught up one priority point on it (nothing starves). The low 10 bits hold the
# submission order (FIFO among jobs submitted within the same millisecond).
_QUEUE_SCORE = """
local function queue_score(priority, create_time, order, aging_ms)
  local aged = tonumber(create_time) - tonumber(priority) * tonumber(aging_ms)
  return aged * 1024 + (tonumber(order) % 1024)
end
"""

# Per-tenant usage, kept in one hash by the scripts that change job states:
# `<tenant>:queued`, `<tenant>:jobs` (RUNNING or ALLOCATING), `<tenant>:devices` (theirs).
_USAGE = """
local function is_active(state) return state == 'RUNNING' or state == 'ALLOCATING' end
local function count_transition(usage_key, tenant, devices, from, to)
  if from == 'QUEUED' and to ~= 'QUEUED' then redis.call('HINCRBY', usage_key, tenant .. ':queued', -1) end
  if to == 'QUEUED' and from ~= 'QUEUED' then redis.call('HINCRBY', usage_key, tenant .. ':queued', 1) end
  if is_active(from) and not is_active(to) then
    redis.call('HINCRBY', usage_key, tenant .. ':jobs', -1)
    redis.call('HINCRBY', usage_key, tenant .. ':devices', -tonumber(devices))
    return true
  end
  if is_active(to) and not is_active(from) then
    redis.call('HINCRBY', usage_key, tenant .. ':jobs', 1)
    redis.call('HINCRBY', usage_key, tenant .. ':devices', tonumber(devices))
  end
  return false
end
"""

# Slots of a worker live in one hash, `worker-slots:<worker>`: slot -> "<expire_at>|<lease_id>".
# Leases of one job are taken all or none: `leases` is a list of {lease_id, worker_id, role,
# slots_json, device_ids_json}; from KEYS[base] on, each lease has its record, its worker, the
# worker's lease set and the worker's slot hash.
_LEASES = """
local function slot_owner(value)
  if not value then return 0, '' end
  local expire, lease_id = string.match(value, '^(%d+)|(.*)$')
  return tonumber(expire), lease_id
end

local function check_leases(leases, base, now)
  local k = base
  for _, l in ipairs(leases) do
    local worker = redis.call('HMGET', KEYS[k + 1], 'expire_at', 'draining')
    if not worker[1] or tonumber(worker[1]) <= now or worker[2] == '1' then
      return 'worker_unavailable', l.worker_id
    end
    for _, slot in ipairs(cjson.decode(l.slots_json)) do
      local held_until = slot_owner(redis.call('HGET', KEYS[k + 3], slot))
      if held_until > now then return 'busy', l.worker_id .. ':' .. slot end
    end
    k = k + 4
  end
  return 'ok', ''
end

local function take_leases(leases, base, now, ttl, job_id, fencing_key, job_leases_key, expiry_key)
  local tokens, k, expire = {}, base, now + ttl
  for i, l in ipairs(leases) do
    local token = redis.call('INCR', fencing_key)
    tokens[i] = token
    for _, slot in ipairs(cjson.decode(l.slots_json)) do
      redis.call('HSET', KEYS[k + 3], slot, expire .. '|' .. l.lease_id)
    end
    redis.call('HSET', KEYS[k], 'lease_id', l.lease_id, 'job_id', job_id, 'worker_id', l.worker_id,
               'role', l.role, 'slots', l.slots_json, 'device_ids', l.device_ids_json,
               'fencing_token', token, 'expire_at', expire)
    redis.call('SADD', job_leases_key, l.lease_id)
    redis.call('SADD', KEYS[k + 2], l.lease_id)
    redis.call('ZADD', expiry_key, expire, l.lease_id)
    k = k + 4
  end
  return tokens
end

-- Free one lease: its record, its slots (if still its own), its set memberships. Key names
-- come from the prefixes in `names` (record, worker leases and worker slots key prefixes).
local function drop_lease(lease_id, names, job_leases_key, expiry_key)
  local record_key = names.record .. lease_id
  local rec = redis.call('HMGET', record_key, 'worker_id', 'slots')
  if rec[1] then
    local slots_key = names.slots .. rec[1]
    for _, slot in ipairs(cjson.decode(rec[2] or '[]')) do
      local _, owner = slot_owner(redis.call('HGET', slots_key, slot))
      if owner == lease_id then redis.call('HDEL', slots_key, slot) end
    end
    redis.call('SREM', names.worker_leases .. rec[1], lease_id)
  end
  redis.call('DEL', record_key)
  redis.call('SREM', job_leases_key, lease_id)
  redis.call('ZREM', expiry_key, lease_id)
  return rec[1] ~= false and rec[1] ~= nil
end
"""

SUBMIT = _QUEUE_SCORE + """
-- KEYS: idem, job, events, tenant index, global index, queue, job counter, tenant, usage
-- ARGV: spec_hash, job_id, now, idem_ttl_s, priority, event_json, aging_ms, tenant_id,
--       wake channel, device_count, wake-up message (the submitting replica), job field pairs...
-- Returns {'created', job_id, queue rank} or {'existing'|'reused', the earlier job_id} or
-- {'quota'|'too_big', the limit}
local found = redis.call('HMGET', KEYS[1], 'job_id', 'spec_hash')
if found[1] then
  if found[2] == ARGV[1] then return {'existing', found[1]} end
  return {'reused', found[1]}
end
local quota = redis.call('HMGET', KEYS[8], 'max_queued_jobs', 'max_devices')
local max_queued, max_devices = tonumber(quota[1] or '0'), tonumber(quota[2] or '0')
if max_devices > 0 and tonumber(ARGV[10]) > max_devices then return {'too_big', tostring(max_devices)} end
local queued = tonumber(redis.call('HGET', KEYS[9], ARGV[8] .. ':queued') or '0')
if max_queued > 0 and queued >= max_queued then return {'quota', tostring(max_queued)} end
local order = redis.call('INCR', KEYS[7])
redis.call('HSET', KEYS[2], 'order', order, 'last_event_sequence', 1, unpack(ARGV, 12))
redis.call('XADD', KEYS[3], 'MAXLEN', MAX_EVENTS, '1-0', 'time', ARGV[3], 'data', ARGV[6])
redis.call('ZADD', KEYS[4], order, ARGV[2])
redis.call('ZADD', KEYS[5], order, ARGV[2])
redis.call('ZADD', KEYS[6], queue_score(ARGV[5], ARGV[3], order, ARGV[7]), ARGV[2])
redis.call('HINCRBY', KEYS[9], ARGV[8] .. ':queued', 1)
redis.call('HSET', KEYS[1], 'job_id', ARGV[2], 'spec_hash', ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('PUBLISH', ARGV[9], ARGV[11])
return {'created', ARGV[2], redis.call('ZRANK', KEYS[6], ARGV[2])}
"""

# Move a job from `cur` (its state, checked by the caller) to `to`: the fields, the StateChanged
# event, the queue, the usage counters, the running set; a job leaving RUNNING/ALLOCATING loses
# every lease it holds in the same step. `k`: job, events, queue, usage, running set, job leases,
# lease expiry, job's stopping set. Returns the event's sequence.
_MOVE_JOB = _QUEUE_SCORE + _USAGE + _LEASES + """
local function move_job(k, now, cur, to, event_json, aging_ms, wake_channel, names_json, fields)
  redis.call('HSET', k[1], 'state', to, 'update_time', now, unpack(fields))
  local seq = redis.call('HINCRBY', k[1], 'last_event_sequence', 1)
  redis.call('XADD', k[2], 'MAXLEN', MAX_EVENTS, seq .. '-0', 'time', now, 'data', event_json)
  local job = redis.call('HMGET', k[1], 'job_id', 'priority', 'order', 'create_time', 'tenant_id',
                         'device_count')
  if to == 'QUEUED' then
    redis.call('ZADD', k[3], queue_score(job[2], job[4], job[3], aging_ms), job[1])
  else
    redis.call('ZREM', k[3], job[1])
  end
  local freed = count_transition(k[4], job[5], job[6] or '0', cur, to)
  if is_active(to) then
    redis.call('SADD', k[5], job[1])
  else
    redis.call('SREM', k[5], job[1])
    redis.call('DEL', k[8])
    local names = cjson.decode(names_json)
    for _, lease_id in ipairs(redis.call('SMEMBERS', k[6])) do drop_lease(lease_id, names, k[6], k[7]) end
  end
  -- wake the allocator only when freed devices (or a re-queued job) could start something
  if (freed or to == 'QUEUED') and redis.call('ZCARD', k[3]) > 0 then
    redis.call('PUBLISH', wake_channel, 'freed')
  end
  return seq
end
"""

TRANSITION = _MOVE_JOB + """
-- KEYS: job, events, queue, usage, running set, job leases, lease expiry, job's stopping set
-- ARGV: now, expected state, new state, event_json, refuse_if_cancel_requested, aging_ms,
--       wake channel, key names json, field pairs...
local cur = redis.call('HGET', KEYS[1], 'state')
if not cur then return {0, ''} end
if cur ~= ARGV[2] then return {0, cur} end
if ARGV[5] == '1' and redis.call('HGET', KEYS[1], 'cancel_requested') == '1' then
  return {0, 'cancel_requested'}
end
return {1, move_job(KEYS, ARGV[1], cur, ARGV[3], ARGV[4], ARGV[6], ARGV[7], ARGV[8], {unpack(ARGV, 9)})}
"""

FINISH = _MOVE_JOB + """
-- FinishJob in one step: a RUNNING job whose lease (this lease id, job and fencing token) has not
-- expired ends SUCCEEDED or FAILED (CANCELLED for a failure once a cancel was requested), its
-- leases released by the same step; the ended job's hash and metrics come back.
-- KEYS: job, events, queue, usage, running set, job leases, lease expiry, job's stopping set,
--       lease record, job metrics
-- ARGV: now, final state, its event json, its status message, the CANCELLED event json, its
--       status message, aging_ms, wake channel, key names json, job id, fencing token
-- Returns {'missing'}, {'state', state} (not RUNNING: nothing done), {'stale'} (nothing done)
-- or {'ok', the state entered, job hash (flat), metrics hash (flat)}
local job = redis.call('HMGET', KEYS[1], 'state', 'cancel_requested')
local cur = job[1]
if not cur then return {'missing'} end
if cur ~= 'RUNNING' then return {'state', cur} end
local lease = redis.call('HMGET', KEYS[9], 'job_id', 'fencing_token', 'expire_at')
if lease[1] ~= ARGV[10] or lease[2] ~= ARGV[11] or tonumber(lease[3] or '0') <= tonumber(ARGV[1]) then
  return {'stale'}
end
local to, event, message = ARGV[2], ARGV[3], ARGV[4]
if to == 'FAILED' and job[2] == '1' then to, event, message = 'CANCELLED', ARGV[5], ARGV[6] end
move_job(KEYS, ARGV[1], cur, to, event, ARGV[7], ARGV[8], ARGV[9], {'end_time', ARGV[1], 'status_message', message})
return {'ok', to, redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[10])}
"""

WATCH_FROM = """
-- Where a WatchJob starts, in one consistent step: the job's state and tenant, and its first
-- `count` stored events from `first` on (as XRANGE returns them).
-- KEYS: job, events   ARGV: first sequence, count
-- Returns {} (no such job) or {state, tenant, events}
local job = redis.call('HMGET', KEYS[1], 'state', 'tenant_id')
if not job[1] then return {} end
return {job[1], job[2] or '', redis.call('XRANGE', KEYS[2], ARGV[1] .. '-0', '+', 'COUNT', ARGV[2])}
"""

START = _USAGE + _LEASES + """
-- QUEUED -> ALLOCATING -> RUNNING with every lease of the job, in one step, or nothing. The
-- attempt's job token nonce and hash are stored with its fencing tokens (opentinker_runtime.auth.job_tokens).
-- KEYS: job, events, queue, fencing, lease expiry, job leases, tenant, usage, running set,
--       lease keys...
-- ARGV: now, ttl, leases_json, allocating_event_json, running_event_json, tenant_id,
--       job token nonce, job token hash,
--       assignment prefixes (one per lease: its JSON up to the fencing token)...
-- Returns {'ok', the RUNNING event's sequence, the fencing tokens comma-separated} or
-- {why not, a detail}.
local now = tonumber(ARGV[1])
local job = redis.call('HMGET', KEYS[1], 'state', 'attempt', 'job_id', 'device_count')
if job[1] ~= 'QUEUED' then return {'state', job[1] or ''} end
local tenant, devices = ARGV[6], tonumber(job[4] or '0')
local quota = redis.call('HMGET', KEYS[7], 'max_concurrent_jobs', 'max_devices')
local used = redis.call('HMGET', KEYS[8], tenant .. ':jobs', tenant .. ':devices')
local max_jobs, max_devices = tonumber(quota[1] or '0'), tonumber(quota[2] or '0')
if max_jobs > 0 and tonumber(used[1] or '0') >= max_jobs then return {'quota_jobs', used[1]} end
if max_devices > 0 and tonumber(used[2] or '0') + devices > max_devices then
  return {'quota_devices', used[2] or '0'}
end
local leases = cjson.decode(ARGV[3])
local status, detail = check_leases(leases, 10, now)
if status ~= 'ok' then return {status, detail} end
local tokens = take_leases(leases, 10, now, tonumber(ARGV[2]), job[3], KEYS[4], KEYS[6], KEYS[5])
local parts = {}
for i = 1, #leases do parts[i] = ARGV[8 + i] .. tokens[i] .. '}' end
redis.call('HSET', KEYS[1], 'state', 'RUNNING', 'update_time', now, 'start_time', now,
           'attempt', tonumber(job[2] or '0') + 1, 'status_message', '',
           'assignments', '[' .. table.concat(parts, ',') .. ']',
           'job_token_nonce', ARGV[7], 'job_token_hash', ARGV[8], 'job_token_fencing', table.concat(tokens, ','))
local seq = redis.call('HINCRBY', KEYS[1], 'last_event_sequence', 1)
redis.call('XADD', KEYS[2], 'MAXLEN', MAX_EVENTS, seq .. '-0', 'time', now, 'data', ARGV[4])
seq = redis.call('HINCRBY', KEYS[1], 'last_event_sequence', 1)
redis.call('XADD', KEYS[2], 'MAXLEN', MAX_EVENTS, seq .. '-0', 'time', now, 'data', ARGV[5])
redis.call('ZREM', KEYS[3], job[3])
redis.call('SADD', KEYS[9], job[3])
count_transition(KEYS[8], tenant, devices, 'QUEUED', 'RUNNING')
return {'ok', tostring(seq), table.concat(tokens, ',')}
"""

NOTE_WAITING = """
-- KEYS: jobs...   ARGV: status messages... (one per job; jobs no longer QUEUED are left alone)
for i = 1, #KEYS do
  if redis.call('HGET', KEYS[i], 'state') == 'QUEUED' then
    redis.call('HSET', KEYS[i], 'status_message', ARGV[i])
  end
end
return #KEYS
"""

LOST_LEASES = """
-- (job id, lease id) of every assignment of a RUNNING job whose lease record is gone, read in
-- one consistent step. KEYS: running set   ARGV: job key prefix, lease record key prefix
local lost = {}
for _, job_id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local assignments = redis.call('HGET', ARGV[1] .. job_id, 'assignments')
  for _, a in ipairs(cjson.decode(assignments or '[]')) do
    if redis.call('EXISTS', ARGV[2] .. a.lease_id) == 0 then
      lost[#lost + 1] = job_id
      lost[#lost + 1] = a.lease_id
    end
  end
end
return lost
"""

HOLD_LOCK = """
-- KEYS: lock   ARGV: owner, ttl_ms. 1 when `owner` holds the lock now (taken or renewed).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

READ_PASS = _LEASES + """
-- What one allocator pass reads, in one consistent step: hold (take or renew) the allocator
-- lock; then, unless the queue is empty (and the workers are not wanted anyway), the first
-- `scan_limit` queued jobs' fields, the quota of each of their tenants, every worker with its
-- slot hash, and the usage counters.
-- KEYS: lock, queue, worker index, usage
-- ARGV: owner, lock ttl_ms, scan_limit, job key prefix, worker key prefix, worker slots key
--       prefix, tenant key prefix, now, workers wanted with an empty queue ('1' or '0'),
--       number of job fields, job fields..., number of quota fields, quota fields...,
--       worker fields...
-- Returns {0} (another replica allocates), {1} (nothing queued, workers not wanted) or
-- {1, {job field values...}..., {tenant, quota values...}..., {worker field values, the worker's
--  slots held by an unexpired lease}..., usage hash}
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0} end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
local ids = redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[3]) - 1)
if #ids == 0 and ARGV[9] ~= '1' then return {1} end
local now = tonumber(ARGV[8])
local job_fields_end = 10 + tonumber(ARGV[10])
local job_fields = {unpack(ARGV, 11, job_fields_end)}
local quota_fields_end = job_fields_end + 1 + tonumber(ARGV[job_fields_end + 1])
local quota_fields = {unpack(ARGV, job_fields_end + 2, quota_fields_end)}
local worker_fields = {unpack(ARGV, quota_fields_end + 1)}
local jobs, quotas, seen = {}, {}, {}
for i, id in ipairs(ids) do
  local row = redis.call('HMGET', ARGV[4] .. id, unpack(job_fields))
  jobs[i] = row
  local tenant = row[2]
  if tenant and not seen[tenant] then
    seen[tenant] = true
    local quota = redis.call('HMGET', ARGV[7] .. tenant, unpack(quota_fields))
    table.insert(quota, 1, tenant)
    quotas[#quotas + 1] = quota
  end
end
local workers = {}
for i, worker_id in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  local held, slots = {}, redis.call('HGETALL', ARGV[6] .. worker_id)
  for k = 1, #slots, 2 do
    if slot_owner(slots[k + 1]) > now then held[#held + 1] = slots[k] end
  end
  workers[i] = {redis.call('HMGET', ARGV[5] .. worker_id, unpack(worker_fields)), held}
end
return {1, jobs, quotas, workers, redis.call('HGETALL', KEYS[4])}
"""

REQUEST_CANCEL = """
-- KEYS: job, events, stopping set
-- ARGV: now, expected state, event_json, worker ids to tell...
local cur = redis.call('HGET', KEYS[1], 'state')
if cur ~= ARGV[2] then return {0, cur or ''} end
if redis.call('HGET', KEYS[1], 'cancel_requested') == '1' then return {2, cur} end
redis.call('HSET', KEYS[1], 'cancel_requested', '1', 'update_time', ARGV[1])
local seq = redis.call('HINCRBY', KEYS[1], 'last_event_sequence', 1)
redis.call('XADD', KEYS[2], 'MAXLEN', MAX_EVENTS, seq .. '-0', 'time', ARGV[1], 'data', ARGV[3])
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
  redis.call('XADD', KEYS[2], 'MAXLEN', MAX_EVENTS, seq .. '-0', 'time', ARGV[1], 'data', ARGV[i])
end
if ARGV[3] == '1' then redis.call('SET', KEYS[3], seq, 'EX', ARGV[2]) end
return {'ok', tostring(seq)}
"""

LEASE_ACQUIRE = _LEASES + """
-- The leases of one job, all or none, without touching the job (see START).
-- KEYS: fencing counter, job leases, expiry, lease keys (4 per lease)...
-- ARGV: now, ttl, job_id, leases_json
local now = tonumber(ARGV[1])
local leases = cjson.decode(ARGV[4])
local status, detail = check_leases(leases, 4, now)
if status ~= 'ok' then return {status, detail} end
local tokens = take_leases(leases, 4, now, tonumber(ARGV[2]), ARGV[3], KEYS[1], KEYS[2], KEYS[3])
return {'ok', cjson.encode(tokens)}
"""

RENEW_LEASES = _LEASES + """
-- A heartbeat: the worker is alive again for ttl, and so is every unexpired lease listed.
-- KEYS: worker, worker index, lease expiry, worker slots, lease records...
-- ARGV: now, ttl, worker_id, lease ids... (one per record key)
-- Returns {alive (0/1), renewed lease ids...}; an expired lease is dead for good.
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local held_until = redis.call('HGET', KEYS[1], 'expire_at')
if not held_until or tonumber(held_until) <= now then return {0} end
local expire = now + ttl
redis.call('HSET', KEYS[1], 'last_heartbeat', now, 'expire_at', expire)
redis.call('ZADD', KEYS[2], expire, ARGV[3])
local renewed = {1}
for i = 5, #KEYS do
  local lease_id = ARGV[i - 1]
  local rec = redis.call('HMGET', KEYS[i], 'expire_at', 'slots')
  if rec[1] and tonumber(rec[1]) > now then
    redis.call('HSET', KEYS[i], 'expire_at', expire)
    redis.call('ZADD', KEYS[3], expire, lease_id)
    for _, slot in ipairs(cjson.decode(rec[2] or '[]')) do
      local _, owner = slot_owner(redis.call('HGET', KEYS[4], slot))
      if owner == lease_id then redis.call('HSET', KEYS[4], slot, expire .. '|' .. lease_id) end
    end
    renewed[#renewed + 1] = lease_id
  end
end
return renewed
"""

WORKER_HEARTBEAT = _LEASES + """
-- A worker's heartbeat in one step: the worker is alive again for ttl, and so is every unexpired
-- lease in its lease set (an expired one is dead for good); each renewed lease comes back with
-- its record and the fields of its job, read in the same step.
-- KEYS: worker, worker index, lease expiry, worker slots, worker's lease set
-- ARGV: now, ttl, worker_id, lease record key prefix, job key prefix, resident models (JSON,
--       stored as the worker's 'resident'), job fields...
-- Returns {0} (dead or unknown: it must register again) or, flat, by lease id:
-- {1, lease id, job field values..., lease id, job field values..., ...}
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local held_until = redis.call('HGET', KEYS[1], 'expire_at')
if not held_until or tonumber(held_until) <= now then return {0} end
local expire = now + ttl
redis.call('HSET', KEYS[1], 'last_heartbeat', now, 'expire_at', expire, 'resident', ARGV[6])
redis.call('ZADD', KEYS[2], expire, ARGV[3])
local job_fields = {unpack(ARGV, 7)}
local renewed = {1}
local ids = redis.call('SMEMBERS', KEYS[5])
table.sort(ids)
for _, lease_id in ipairs(ids) do
  local record_key = ARGV[4] .. lease_id
  local rec = redis.call('HMGET', record_key, 'expire_at', 'slots', 'job_id')
  if rec[1] and tonumber(rec[1]) > now then
    redis.call('HSET', record_key, 'expire_at', expire)
    redis.call('ZADD', KEYS[3], expire, lease_id)
    for _, slot in ipairs(cjson.decode(rec[2] or '[]')) do
      local _, owner = slot_owner(redis.call('HGET', KEYS[4], slot))
      if owner == lease_id then redis.call('HSET', KEYS[4], slot, expire .. '|' .. lease_id) end
    end
    renewed[#renewed + 1] = lease_id
    for _, value in ipairs(redis.call('HMGET', ARGV[5] .. (rec[3] or ''), unpack(job_fields))) do
      renewed[#renewed + 1] = value
    end
  end
end
return renewed
"""

LEASE_RELEASE = _LEASES + """
-- KEYS: lease record, job leases, lease expiry
-- ARGV: lease_id, expired_at_or_before ('' = release whatever the expiry), key names json
local held_until = redis.call('HGET', KEYS[1], 'expire_at')
if held_until and ARGV[2] ~= '' and tonumber(held_until) > tonumber(ARGV[2]) then return -1 end
if drop_lease(ARGV[1], cjson.decode(ARGV[3]), KEYS[2], KEYS[3]) then return 1 end
return 0
"""


@dataclass(frozen=True, kw_only=True)
class Scripts:
    """The scripts registered on one client (EVALSHA, reloaded by redis-py after a flush)."""

    submit: AsyncScript
    transition: AsyncScript
    finish: AsyncScript
    watch_from: AsyncScript
    start: AsyncScript
    hold_lock: AsyncScript
    note_waiting: AsyncScript
    lost_leases: AsyncScript
    request_cancel: AsyncScript
    append_events: AsyncScript
    lease_acquire: AsyncScript
    renew_leases: AsyncScript
    lease_release: AsyncScript
    read_pass: AsyncScript
    worker_heartbeat: AsyncScript

    @classmethod
    def register(cls, client: redis.asyncio.Redis, *, max_events_per_job: int = 100_000) -> Scripts:
        sources = {"submit": SUBMIT, "transition": TRANSITION, "finish": FINISH, "watch_from": WATCH_FROM,
                   "start": START, "hold_lock": HOLD_LOCK,
                   "note_waiting": NOTE_WAITING, "lost_leases": LOST_LEASES,
                   "request_cancel": REQUEST_CANCEL,
                   "append_events": APPEND_EVENTS, "lease_acquire": LEASE_ACQUIRE,
                   "renew_leases": RENEW_LEASES, "lease_release": LEASE_RELEASE,
                   "read_pass": READ_PASS, "worker_heartbeat": WORKER_HEARTBEAT}
        prelude = f"local MAX_EVENTS = {int(max_events_per_job)}\n"
        return cls(**{name: client.register_script(prelude + text) for name, text in sources.items()})
