"""The reference shop: the downstream the support agent's tools call (examples/support_tools.py), as
they would a real order system, carrier feed and customer-service API, with the "shop" Redis user.

Orders and tracking are what the shop and its carriers know; the demo and the load put them there
as an operator's admin (`stock`). Every call answers once per op key: a read (an order, a parcel's
tracking) keeps the first answer it gave under its key, so a step redone after a crash is shown what
the first call was shown; a write (a refund or a replacement, a notice) is one WATCH/MULTI
transaction that refuses a fence older than one seen for the task, so a stale lease holder can
neither write nor replay, gives a replayed op key the first outcome back, and logs the outcome in
`shop:{shop}:log`, where its effects are counted. Times come from the Redis server's clock.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import ClassVar, Literal, cast, get_args

import orjson
import redis
from pydantic import Field

from wakeful.core.errors import DownstreamRefused, DownstreamUnavailable, FencedOff
from wakeful.schemas.base import Record
from wakeful.state.downstreams import Downstream, op_record, task_record
from wakeful.state.keys import CAS_RETRIES

# The shop's keyspace, its own and no role's, under one hash tag ({shop}): a write names its log
# stream beside its records in one atomic step, in one slot of a Redis Cluster.
#   shop:{shop}:order:O     string  JSON order O as the shop knows it                (admin: stock)
#   shop:{shop}:parcel:P    string  JSON tracking of parcel P as its carrier reports  (admin: stock)
#   shop:{shop}:op:K        string  JSON answer or outcome of the one call under op key K  (shop)
#   shop:{shop}:fence:T     string  highest fencing token seen for task T                  (shop)
#   shop:{shop}:log         stream  every remedy and notice, in order (field "r": JSON)    (shop)
PATTERN = "shop:*"
TAG = "shop:{shop}"
LOG = f"{TAG}:log"
REF = r"[A-Za-z0-9_.-]{1,64}"  # an order id or a parcel id
Status = Literal["delivered", "in_transit", "lost", "damaged"]  # what a carrier may report
STATUSES: tuple[str, ...] = get_args(Status)
_REF = re.compile(REF)
_PAGE = 500
_Page = list[tuple[bytes, dict[bytes, bytes]]]  # XRANGE reply: (stream id, fields) in id order
_Pipe = redis.client.Pipeline


def _ref(raw: str, what: str) -> str:
    if not isinstance(raw, str) or not _REF.fullmatch(raw):
        raise ValueError(f"{what} must match {REF}, got {raw!r:.40}")
    return raw


def order_key(order_id: str) -> str:
    return f"{TAG}:order:{_ref(order_id, 'an order id')}"


def parcel_key(parcel: str) -> str:
    return f"{TAG}:parcel:{_ref(parcel, 'a parcel id')}"


def call_key(op_key: str) -> str:
    return op_record(TAG, "op", op_key)


def fence_key(task_id: str) -> str:
    return task_record(TAG, "fence", task_id)


class Order(Record):
    """An order as the shop knows it: what was bought, what was paid, the parcel it went in."""

    KIND: ClassVar[str] = "shop_order"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA
    order_id: str = Field(pattern=f"^{REF}$")
    item: str = Field(min_length=1, max_length=200)
    amount: int = Field(gt=0)  # minor units
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    parcel: str = Field(pattern=f"^{REF}$")
    in_stock: bool  # whether a replacement can be sent


class Tracking(Record):
    """A parcel's tracking as its carrier reports it: `detail` is the carrier's own text."""

    KIND: ClassVar[str] = "shop_tracking"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA
    parcel: str = Field(pattern=f"^{REF}$")
    carrier: str = Field(min_length=1, max_length=100)
    status: Status
    detail: str = Field(max_length=2000)


class _Outcome(Record):
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA
    op_key: str = Field(min_length=1, max_length=200)  # the caller's idempotency key
    task_id: str = Field(min_length=1, max_length=64)


class Answer(_Outcome):
    """The first answer to a read under one op key, given again to any later call under it."""

    KIND: ClassVar[str] = "shop_answer"
    kind: Literal["answer"] = "answer"
    answer: dict[str, str]


class Remedy(_Outcome):
    """A refund of what was paid, or a replacement sent, for one order under one op key."""

    KIND: ClassVar[str] = "shop_remedy"
    kind: Literal["remedy"] = "remedy"
    fence: int = Field(ge=0)
    at: datetime  # the Redis server's clock, UTC
    remedy: Literal["refund", "replacement"]
    order_id: str = Field(pattern=f"^{REF}$")
    amount: int = Field(gt=0)
    currency: str = Field(pattern=r"^[A-Z]{3}$")


class Notice(_Outcome):
    """A message sent to the customer about one order under one op key."""

    KIND: ClassVar[str] = "shop_notice"
    kind: Literal["notice"] = "notice"
    fence: int = Field(ge=0)
    at: datetime
    order_id: str = Field(pattern=f"^{REF}$")
    message: str = Field(min_length=1, max_length=1000)


Effect = Remedy | Notice
_KINDS: dict[str, type[Answer] | type[Remedy] | type[Notice]] = {
    "answer": Answer,
    "remedy": Remedy,
    "notice": Notice,
}


def decode(raw: bytes) -> Answer | Remedy | Notice:
    kind = orjson.loads(raw).get("kind")
    if kind not in _KINDS:
        raise ValueError(f"not a shop record: kind {kind!r}")
    return _KINDS[kind].decode(raw)


class Shop:
    """The shop's API, for a client authenticated as the "shop" ACL user (or the admin)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def stock(self, *records: Order | Tracking) -> None:
        """Put orders and tracking where the shop finds them (the demo's and the load's setup)."""
        pipe = self.client.pipeline(transaction=False)
        for record in records:
            key = order_key(record.order_id) if isinstance(record, Order) else parcel_key(record.parcel)
            pipe.set(key, record.encode())
        pipe.execute()

    def order(self, op_key: str, task_id: str, order_id: str) -> Mapping[str, str]:
        """The order, as first answered under `op_key`; {"found": "no"} for an order the shop lacks."""
        raw = self.client.get(order_key(order_id))
        found = Order.decode(raw) if isinstance(raw, bytes) else None
        shown = {"found": "no", "order_id": order_id}
        if found is not None:
            dumped = found.model_dump(mode="json", exclude={"schema_version"})
            shown = {
                "found": "yes",
                **{k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in dumped.items()},
            }
        return self._answer(op_key, task_id, shown)

    def tracking(self, op_key: str, task_id: str, parcel: str) -> Mapping[str, str]:
        """The parcel's tracking, as first answered under `op_key`; status "unknown" if no carrier has it."""
        raw = self.client.get(parcel_key(parcel))
        found = Tracking.decode(raw) if isinstance(raw, bytes) else None
        shown = {"parcel": parcel, "status": "unknown", "carrier": "", "detail": "no carrier knows it"}
        if found is not None:
            shown = {k: str(v) for k, v in found.model_dump(mode="json", exclude={"schema_version"}).items()}
        return self._answer(op_key, task_id, shown)

    def remedy(
        self, op_key: str, task_id: str, fence: int, *, remedy: str, order_id: str, amount: int, currency: str
    ) -> Remedy:
        """Refund or replace an order once per op key; a replay returns the first outcome."""

        def made(at: datetime) -> Remedy:
            return Remedy(
                op_key=op_key, task_id=task_id, fence=fence, at=at, remedy=cast(Literal["refund"], remedy),
                order_id=order_id, amount=amount, currency=currency,
            )  # fmt: skip

        return cast(Remedy, self._write(op_key, task_id, fence, made))

    def notify(self, op_key: str, task_id: str, fence: int, *, order_id: str, message: str) -> Notice:
        """Send the customer a message once per op key; a replay returns the first notice."""

        def made(at: datetime) -> Notice:
            return Notice(
                op_key=op_key, task_id=task_id, fence=fence, at=at, order_id=order_id, message=message
            )

        return cast(Notice, self._write(op_key, task_id, fence, made))

    def lookup(self, op_key: str) -> Answer | Remedy | Notice | None:
        """What the call under `op_key` answered or did, or None if it never landed."""
        raw = self.client.get(call_key(op_key))
        return decode(raw) if isinstance(raw, bytes) else None

    def entries(self, task_id: str | None = None) -> list[Effect]:
        """Every remedy and notice in the order made, or only those for one task."""
        out: list[Effect] = []
        start = "-"
        while True:
            page = cast(_Page, self.client.xrange(LOG, start, "+", count=_PAGE))
            for _, fields in page:
                found = decode(fields[b"r"])
                if isinstance(found, Remedy | Notice) and (task_id is None or found.task_id == task_id):
                    out.append(found)
            if len(page) < _PAGE:
                return out
            start = "(" + page[-1][0].decode()

    def _answer(self, op_key: str, task_id: str, shown: dict[str, str]) -> Mapping[str, str]:
        """`shown`, kept under the op key unless an answer is kept there already: then that one."""
        first = Answer(op_key=op_key, task_id=task_id, answer=shown)
        kept = self.client.set(call_key(op_key), first.encode(), nx=True, get=True)
        if isinstance(kept, bytes):
            earlier = decode(kept)
            if not isinstance(earlier, Answer):
                raise DownstreamRefused(op_key, task_id, f"the op key names a {earlier.kind}, not a read")
            return earlier.answer
        return shown

    def _write(self, op_key: str, task_id: str, fence: int, made: Callable[[datetime], Effect]) -> Effect:
        """WATCH -> read -> verify -> MULTI -> write -> EXEC, for one effect under one op key."""
        result_key, fenced = call_key(op_key), fence_key(task_id)
        for _ in range(CAS_RETRIES):
            secs, usecs = self.client.time()  # before WATCH: a cluster pipeline names only its slot
            with self.client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(result_key, fenced)  # type: ignore[no-untyped-call]  # unannotated upstream
                    seen = pipe.get(fenced)
                    if seen is not None and fence < int(seen):
                        raise FencedOff(op_key, task_id, fence, int(seen))
                    done = pipe.get(result_key)
                    if isinstance(done, bytes):
                        first = decode(done)
                        if isinstance(first, Answer):
                            raise DownstreamRefused(op_key, task_id, "the op key names a read")
                        return first
                    outcome = made(datetime.fromtimestamp(secs + usecs / 1e6, UTC))
                    pipe.multi()
                    pipe.set(result_key, outcome.encode())
                    if seen is None or fence > int(seen):
                        pipe.set(fenced, fence)
                    pipe.xadd(LOG, {"r": outcome.encode()})
                    pipe.execute()
                    return outcome
                except redis.WatchError:
                    continue
        raise DownstreamUnavailable(op_key, task_id, f"{CAS_RETRIES} concurrent writers in a row")


def effects(admin: redis.Redis, task_id: str | None) -> list[dict[str, object]]:
    """`wakeful ledger`: the remedies and notices, or one task's, as an operator reads them."""
    return [e.model_dump(mode="json") for e in Shop(admin).entries(task_id)]


# Plain WATCH/MULTI transactions and SET NX GET, no Lua: it calls no function. Its tools are
# minted a user per step (D120): it has no static login (D125).
DOWNSTREAM = Downstream(
    "shop", PATTERN, ("+get", "+set", "+watch", "+xadd", "+xrange"), entries=effects, static_login=False
)
