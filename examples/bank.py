"""The reference downstream bank: a ledger that honours idempotency keys and fencing tokens.

The executor calls it like a real payments API. `refund` is one Lua function (state/functions.py:
the admin loads it, the bank's credential only calls it), so its checks and its
booking are atomic: a fence older than one the bank has seen for the task is refused, so a stale
lease holder can neither move money nor replay; a replayed op key gets the first booking back (even
if the amount differs); an injected fault (`bank:{ledger}:faults:T`, a test hook) refuses the call
transiently.
Booking times and entry ids come from the Redis server's clock, so every process agrees on them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar, cast

import orjson
import redis
from pydantic import Field

from wakeful.core.errors import DownstreamUnavailable, FencedOff
from wakeful.schemas.base import Record
from wakeful.state.downstreams import Downstream, op_record, task_record
from wakeful.state.functions import Function, call

# The bank's keyspace, its own and no role's: one hash tag ({ledger}), so that its booking names its
# log stream beside its per-key records in one atomic step, in one slot of a Redis Cluster.
#   bank:{ledger}:entry:K   string  JSON ledger entry for one idempotency (op) key K   (its function)
#   bank:{ledger}:ledger    stream  every entry in booking order (field "e": JSON)      (its function)
#   bank:{ledger}:fence:T   string  highest fencing token the bank has seen for task T  (its function)
#   bank:{ledger}:faults:T  string  test hook: how many calls for task T fail first     (admin)
# `entry:` is a prefix no other of its keys starts with, so a colon in an op key reaches no other kind.
PATTERN = "bank:*"
TAG = "bank:{ledger}"
LEDGER = f"{TAG}:ledger"


def entry_key(op_key: str) -> str:
    return op_record(TAG, "entry", op_key)


def fence_key(task_id: str) -> str:
    return task_record(TAG, "fence", task_id)


def faults_key(task_id: str) -> str:
    return task_record(TAG, "faults", task_id)


_PAGE = 500  # ledger entries per XRANGE round trip in entries()
_Page = list[tuple[bytes, dict[bytes, bytes]]]  # XRANGE reply: (stream id, fields) in id order
_PENDING = datetime(1970, 1, 1, tzinfo=UTC)  # stands in for booked_at while a request is validated


class LedgerEntry(Record):
    """One booking: what the bank did for one idempotency key."""

    KIND: ClassVar[str] = "ledger_entry"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA

    entry_id: str  # "L-<id of the entry in bank:{ledger}:ledger>"
    op_key: str = Field(min_length=1)  # the caller's idempotency key; one booking per key, ever
    task_id: str = Field(min_length=1)
    amount: int = Field(gt=0)  # minor units (cents)
    currency: str = Field(pattern=r"^[A-Z]{3}$")  # ISO 4217
    fence: int = Field(ge=0)  # the caller's fencing token when it booked
    booked_at: datetime  # the Redis server's clock, UTC


# Lua: the UTC ISO-8601 time of a Redis TIME reply (seconds, microseconds), e.g.
# 2025-01-31T12:00:00.000001Z. Redis Lua has no os.date; days -> civil date is H. Hinnant's
# days_from_civil inverse, exact in doubles for any date Redis can report.
_ISO_UTC = """
local function iso_utc(secs, usecs)
  local s = tonumber(secs)
  local days = math.floor(s / 86400)
  local rem = s - days * 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local day = doy - math.floor((153 * mp + 2) / 5) + 1
  local month = mp < 10 and mp + 3 or mp - 9
  local year = yoe + era * 400 + (month <= 2 and 1 or 0)
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%06dZ', year, month, day,
    math.floor(rem / 3600), math.floor((rem % 3600) / 60), rem % 60, tonumber(usecs))
end
"""

# KEYS[1] bank:{ledger}:entry:K, KEYS[2] ...:fence:T, KEYS[3] ...:faults:T, KEYS[4] ...:ledger (one
# slot: the {ledger} hash tag);
# ARGV[1] the caller's fence, ARGV[2] the entry's other fields as a JSON object (encoded by Python,
# so amounts never pass through Lua's doubles).
# returns: {-1, highest fence seen} the caller's fence is stale (checked first: a stale lease
#          holder is refused even a replay; it must look the key up instead);
#          {1, entry} booked by this call; {0, entry} the key was booked before (nothing new);
#          {-2, faults left} injected fault.
# The entry id is the stream id this call XADDs with: the server's millisecond clock, after the
# highest id already in the ledger (XRANGE from now: only same-millisecond entries, unless the
# clock stepped back), so the id is known before the entry is written and the stream stays ordered.
REFUND = Function(
    "bank_refund",
    _ISO_UTC
    + """
local seen = redis.call('GET', KEYS[2])
if seen and tonumber(ARGV[1]) < tonumber(seen) then return {-1, seen} end
local booked = redis.call('GET', KEYS[1])
if booked then return {0, booked} end
local faults = tonumber(redis.call('GET', KEYS[3]))
if faults and faults > 0 then return {-2, redis.call('DECR', KEYS[3])} end
local now = redis.call('TIME')
local id = now[1] .. string.format('%03d', math.floor(tonumber(now[2]) / 1000)) .. '-0'
local later = redis.call('XRANGE', KEYS[4], id, '+')
if #later > 0 then
  local last = later[#later][1]
  local dash = string.find(last, '-', 1, true)
  id = string.sub(last, 1, dash) .. string.format('%d', tonumber(string.sub(last, dash + 1)) + 1)
end
local entry = '{"entry_id":"L-' .. id .. '","booked_at":"' .. iso_utc(now[1], now[2]) .. '",'
  .. string.sub(ARGV[2], 2)
redis.call('XADD', KEYS[4], id, 'e', entry)
redis.call('SET', KEYS[1], entry)
if not seen or tonumber(ARGV[1]) > tonumber(seen) then redis.call('SET', KEYS[2], ARGV[1]) end
return {1, entry}
""",
)

FUNCTIONS = (REFUND,)


class Bank:
    """The bank's API, for a client authenticated as the "bank" ACL user."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def refund(self, op_key: str, task_id: str, amount: int, currency: str, fence: int) -> LedgerEntry:
        """Book a refund once per op key and return the booking (the first one, on a replay).

        Raises pydantic.ValidationError for a malformed request, FencedOff when the bank has seen a
        newer fence for the task, and DownstreamUnavailable on an injected fault; nothing is booked.
        """
        # Validate the request with the entry's own rules before anything is booked, so a booking
        # always decodes; the script adds the two fields only the server can know.
        draft = LedgerEntry(
            entry_id="L-pending",
            op_key=op_key,
            task_id=task_id,
            amount=amount,
            currency=currency,
            fence=fence,
            booked_at=_PENDING,
        )
        body = orjson.dumps(draft.model_dump(mode="json", exclude={"entry_id", "booked_at"}))
        code, value = call(
            self.client,
            REFUND,
            [entry_key(op_key), fence_key(task_id), faults_key(task_id), LEDGER],
            [fence, body],
        )
        if code == -1:
            raise FencedOff(op_key, task_id, fence, int(value))
        if code == -2:
            raise DownstreamUnavailable(op_key, task_id, f"injected fault, {int(value)} more to come")
        return LedgerEntry.decode(value)

    def lookup(self, op_key: str) -> LedgerEntry | None:
        """The booking for an op key, or None if it never landed ("did my call land?")."""
        raw = self.client.get(entry_key(op_key))
        return LedgerEntry.decode(raw) if isinstance(raw, bytes) else None

    def entries(self, task_id: str | None = None) -> list[LedgerEntry]:
        """Every booking in booking order, or only those for one task."""
        out: list[LedgerEntry] = []
        start = "-"
        while True:
            # redis-py types the reply for every client flavour; a bytes client returns this shape.
            page = cast(_Page, self.client.xrange(LEDGER, start, "+", count=_PAGE))
            for _, fields in page:
                entry = LedgerEntry.decode(fields[b"e"])
                if task_id is None or entry.task_id == task_id:
                    out.append(entry)
            if len(page) < _PAGE:
                return out
            start = "(" + page[-1][0].decode()


def ledger(admin: redis.Redis, task_id: str | None) -> list[dict[str, object]]:
    """`wakeful ledger`: the bookings, or one task's, as an operator reads them."""
    return [e.model_dump(mode="json") for e in Bank(admin).entries(task_id)]


# Its users book only through REFUND, whose commands their selector grants too (D31). Every tool
# that calls it is minted a user per step (D120), so it has no static login (D125).
DOWNSTREAM = Downstream(
    "bank", PATTERN, ("+get", "+set", "+incr", "+decr", "+xadd", "+xrange"), FUNCTIONS, entries=ledger,
    static_login=False,
)  # fmt: skip
