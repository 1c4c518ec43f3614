"""The task index's functions (state/index.py calls them; state/library.py loads them): one call
moves a task between its tenant's sets, all under the tenant's hash tag, and never back to an older
state_version; the relay's MAC of a summary is added, or a forged summary cleared, in one step."""

from __future__ import annotations

from wakeful.state.functions import Function

# KEYS[1] the tenant's tasks hash; ARGV[1] a task id, ARGV[2] its summary as read, ARGV[3] the same
# summary signed. returns: 1 signed; 0 the summary changed since it was read (left as it is).
SIGN = Function(
    "index_sign",
    """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
""",
)

# Lua: take task `task` out of the sets its stored summary `was` names (stage, waits, attribute
# values; its creation and workflow sets hold it for as long as it is indexed), all under the hash
# tag of `prefix`; an attribute value's set among `new` (set name -> true) it stays in, noted in
# `kept`. An attribute's set is named by the SHA-1 of its value, as keys.index_by names it.
_LEAVE = """
local function leave(prefix, was, task, new, kept)
  if type(was) ~= 'table' then return end
  if type(was['stage']) == 'string' then redis.call('ZREM', prefix .. 'stage:' .. was['stage'], task) end
  if type(was['waits']) == 'table' then
    for _, w in ipairs(was['waits']) do
      if type(w) == 'table' and type(w['wait_for']) == 'string' then
        redis.call('ZREM', prefix .. 'wait:' .. w['wait_for'], task)
      end
    end
  end
  if type(was['attributes']) == 'table' then
    for name, value in pairs(was['attributes']) do
      if type(name) == 'string' and type(value) == 'string' then
        local set = prefix .. 'by:attr:' .. name .. ':' .. redis.sha1hex(value)
        if new[set] then kept[set] = true else redis.call('ZREM', set, task) end
      end
    end
  end
end
"""

# KEYS[1] the tenant's tasks hash, KEYS[2] the task's new stage set, KEYS[3] the tenant's creation
# set, KEYS[4] its workflow's set, KEYS[5..4+n] its attribute values' sets, KEYS[5+n..] its wait
# sets (all under the tenant's hash tag); ARGV[1] task id, ARGV[2] state_version, ARGV[3] summary
# JSON, ARGV[4] last change (ms), ARGV[5] creation (ms; "" for a task made before records said:
# the first change the index saw stands for it), ARGV[6] n, ARGV[7..] each wait's deadline (ms),
# in the wait sets' order. returns: 1 applied, 0 the index holds this or a later state_version.
# The sets the task leaves are named from its stored summary: keys of the same hash tag as KEYS[1].
APPLY = Function(
    "index_apply",
    _LEAVE
    + """
local prefix = string.sub(KEYS[1], 1, #KEYS[1] - #'tasks')
local n = tonumber(ARGV[6])
local new, kept = {}, {}
for i = 5, 4 + n do new[KEYS[i]] = true end
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old then
  local ok, was = pcall(cjson.decode, old)
  if ok and type(was) == 'table' then
    if (tonumber(was['state_version']) or -1) >= tonumber(ARGV[2]) then return 0 end
    leave(prefix, was, ARGV[1], new, kept)
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
local created = ARGV[5]
if created == '' then
  redis.call('ZADD', KEYS[3], 'NX', ARGV[4], ARGV[1])
  created = redis.call('ZSCORE', KEYS[3], ARGV[1])
else
  redis.call('ZADD', KEYS[3], created, ARGV[1])
end
redis.call('ZADD', KEYS[4], created, ARGV[1])
for i = 5, 4 + n do
  if not kept[KEYS[i]] then redis.call('ZADD', KEYS[i], created, ARGV[1]) end
end
for i = 5 + n, #KEYS do redis.call('ZADD', KEYS[i], ARGV[i + 2 - n], ARGV[1]) end
return 1
""",
)
# KEYS[1] the tenant's tasks hash; ARGV[1] a task id, ARGV[2] its stored summary, which the relay
# found written by hand (no MAC of its key, D93). Takes the task out of the sets that summary names
# and leaves a placeholder of state_version -1, so the APPLY that follows is never refused by the
# version a forged summary claimed. returns: 1 done; 0 the summary changed since it was read.
UNFORGE = Function(
    "index_unforge",
    _LEAVE
    + """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
local ok, was = pcall(cjson.decode, ARGV[2])
if ok then leave(string.sub(KEYS[1], 1, #KEYS[1] - #'tasks'), was, ARGV[1], {}, {}) end
redis.call('HSET', KEYS[1], ARGV[1], '{"state_version":-1}')
return 1
""",
)
