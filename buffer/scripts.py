"""Server-side Lua scripts: the buffer's few read-modify-write steps, each one atomic.

Why Lua rather than MULTI: these steps branch on a result inside the transaction (was the XACK
effective? is there room? is the version newer?), which MULTI cannot do. A script runs
atomically like MULTI/EXEC and is persisted to the AOF by its effects.

Entry-id scores. The ``acked`` ZSETs score a stream id ``ms-seq`` as ``ms * 1000 + min(seq, 999)``:
exact in a double (ms ~ 1.8e12 -> 1.8e15 < 2**53) and ordered like the ids (ties only past 999
entries in one millisecond, which only blur which of those is trimmed first).
"""

from __future__ import annotations

import redis

_ID_HELPERS = """
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function score(id)
  local ms, seq = parse(id)
  return ms * 1000 + math.min(seq, 999)
end
"""

# KEYS: groups stream, counters hash, prompts stream, prompts acked zset, consumed set, fresh set
# ARGV: payload, max_unconsumed, prompt entry id ('' = none), prompts consumer group, group id
# -> {1, id} stored | {0, ''} full (retry later) | {2, ''} duplicate: the prompt was already answered
# A group id neither consumed nor already in the stream goes into the fresh set and its entry gets
# the 'fresh' field: readers skip the consumed-set check for it on first delivery (one round trip
# per take). Any other copy is written unmarked, and a reader checks it.
# The payload goes through ARGV: measured (bench/buffer_throughput.py) cheaper in client+server
# CPU than MULTI{XADD; EVAL} with a redis-py pipeline (buffer/raw 0.77 vs 0.73), and the room
# check stays exact.
PUT_GROUP = _ID_HELPERS + """
local unconsumed = tonumber(redis.call('HGET', KEYS[2], 'groups_unconsumed') or '0')
if unconsumed >= tonumber(ARGV[2]) then return {0, ''} end
if ARGV[3] ~= '' then
  if redis.call('XACK', KEYS[3], ARGV[4], ARGV[3]) == 0 then
    redis.call('HINCRBY', KEYS[2], 'groups_duplicate_dropped', 1)
    return {2, ''}
  end
  redis.call('ZADD', KEYS[4], score(ARGV[3]), ARGV[3])
end
local id
if redis.call('SISMEMBER', KEYS[5], ARGV[5]) == 0 and redis.call('SADD', KEYS[6], ARGV[5]) == 1 then
  id = redis.call('XADD', KEYS[1], '*', 'data', ARGV[1], 'fresh', '1')
else
  id = redis.call('XADD', KEYS[1], '*', 'data', ARGV[1])
end
redis.call('HINCRBY', KEYS[2], 'groups_unconsumed', 1)
redis.call('HINCRBY', KEYS[2], 'groups_written', 1)
return {1, id}
"""

# KEYS: stream, its acked zset, counters hash, consumed set, fresh set
# ARGV: consumer group, gauge field to decrement per effective ACK ('' = none),
#       then triples (entry id, group id to mark consumed (and no longer fresh) or '',
#       counter field to bump or '')
# The counter field may name several counters, comma-separated ("groups_consumed,groups_trained").
# Only an effective XACK (the entry was pending) moves the counters, so a retried or repeated
# ACK never double-counts. An effective 'trained' ACK of a group id already in the consumed set
# means one group was trained twice: counted in 'groups_consumed_twice' for the audit (must stay 0).
# Everything but the XACKs is one call per key for the whole batch: ~20 calls for 16 groups
# instead of 112, each also an AOF record (server time per 16-group ACK 250 -> ~200 us, SLOWLOG).
# -> number of effective ACKs
ACK = _ID_HELPERS + """
local function call_chunks(cmd, key, list)   -- one call per 1000 values (Lua's unpack is bounded)
  local out = {}
  for i = 1, #list, 1000 do
    local reply = redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
    if type(reply) == 'table' then for _, v in ipairs(reply) do out[#out + 1] = v end end
  end
  return out
end
local n, scored, bumps = 0, {}, {}
local gids, trained = {}, {}   -- group ids to mark consumed; whether each one's ACK trained it
for i = 3, #ARGV, 3 do
  local id, gid, field = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local effective = redis.call('XACK', KEYS[1], ARGV[1], id) == 1
  if effective then
    n = n + 1
    scored[#scored + 1] = score(id)
    scored[#scored + 1] = id
    bumps[field] = (bumps[field] or 0) + 1
  end
  if gid ~= '' then
    gids[#gids + 1] = gid
    trained[#gids] = effective and string.find(field, 'groups_trained', 1, true) ~= nil
  end
end
if n > 0 then
  call_chunks('ZADD', KEYS[2], scored)
  if ARGV[2] ~= '' and redis.call('HINCRBY', KEYS[3], ARGV[2], -n) < 0 then
    redis.call('HSET', KEYS[3], ARGV[2], 0)   -- an entry XADDed around put_group: stay >= 0
  end
  for field, k in pairs(bumps) do
    for f in string.gmatch(field, '[^,]+') do redis.call('HINCRBY', KEYS[3], f, k) end
  end
end
if #gids > 0 then
  local before, member, twice = call_chunks('SMISMEMBER', KEYS[4], gids), {}, 0
  for i, gid in ipairs(gids) do
    if trained[i] and (member[gid] or before[i] == 1) then twice = twice + 1 end
    member[gid] = true
  end
  if twice > 0 then redis.call('HINCRBY', KEYS[3], 'groups_consumed_twice', twice) end
  call_chunks('SADD', KEYS[4], gids)
  call_chunks('SREM', KEYS[5], gids)
end
return n
"""

# KEYS: stream, its acked zset. ARGV: consumer group, retention (ACKed entries to keep)
# Drops ACKed entries older than the newest `retention` ones and never an unconsumed one: the cut
# stays below the group's last delivered id and its oldest pending id. One round trip (the
# Python version took four; each costs ~0.3 ms right after a multi-MB read on a small VM).
# -> number of entries trimmed
TRIM = _ID_HELPERS + """
local n_acked = redis.call('ZCARD', KEYS[2])
local retention = tonumber(ARGV[2])
if n_acked <= retention then return 0 end
local function older(a, b)
  local ams, aseq = parse(a)
  local bms, bseq = parse(b)
  return ams < bms or (ams == bms and aseq < bseq)
end
local floor = nil
for _, info in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local fields = {}
  for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
  if fields['name'] == ARGV[1] then floor = fields['last-delivered-id'] end
end
if not floor then return 0 end
local oldest_pending = redis.call('XPENDING', KEYS[1], ARGV[1])[2]
if oldest_pending and older(oldest_pending, floor) then floor = oldest_pending end
local cut = redis.call('ZRANGE', KEYS[2], n_acked - retention - 1, n_acked - retention - 1)[1]
local ms, seq = string.match(cut, '^(%d+)-(%d+)$')   -- ms kept as text: '..' on a number keeps 14 digits
local minid = ms .. '-' .. (tonumber(seq) + 1)       -- keep the cut's successor and everything newer
if older(floor, minid) then minid = floor end
if minid == '0-0' then return 0 end
local trimmed = redis.call('XTRIM', KEYS[1], 'MINID', minid)     -- exact: '~' trims whole nodes only
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('(%.17g', score(minid)))   -- '..' would round to 14 digits
return trimmed
"""

# KEYS: version hash, versions stream. ARGV: version, location, unix time, history maxlen
# Refuses to go backwards; re-publishing the current version (a restarted learner) is allowed.
PUBLISH_VERSION = """
local cur = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
local new = tonumber(ARGV[1])
if new < cur then
  return redis.error_reply('LAGRL_VERSION_BACKWARDS ' .. ARGV[1] .. ' < current ' .. tostring(cur))
end
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'location', ARGV[2], 'time', ARGV[3])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'version', ARGV[1], 'location', ARGV[2],
           'time', ARGV[3])
return cur
"""


def id_score(entry_id: str) -> int:
    """The Lua ``score`` in Python (the tests check that it is exact and ordered)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms) * 1000 + min(int(seq or 0), 999)


def id_key(entry_id: bytes | str) -> tuple[int, int]:
    """Sort key of a stream id ("ms-seq")."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


class Scripts:
    """The scripts registered on one client (redis-py loads them lazily, EVALSHA afterwards)."""

    def __init__(self, client: redis.Redis):
        self.put_group = client.register_script(PUT_GROUP)
        self.ack = client.register_script(ACK)
        self.trim = client.register_script(TRIM)
        self.publish_version = client.register_script(PUBLISH_VERSION)


def queue_eval(pipe, source: str, keys: list, args: list) -> None:
    """Queue a script on a MULTI pipeline as EVAL (source included), never EVALSHA.

    Inside MULTI a NOSCRIPT error (script cache empty after a server restart) would fail the
    script while the other queued commands still run; EVAL cannot hit it. Redis caches the
    compiled script by its SHA, so only the few hundred bytes of source are re-sent.
    """
    pipe.eval(source, len(keys), *keys, *args)
