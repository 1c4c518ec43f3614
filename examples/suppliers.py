"""The reference supplier register: a downstream that registers suppliers and schedules their first
payment, honouring idempotency keys and fencing tokens. The onboarding app's tools call it as they
would a real vendor-master API, with the "suppliers" Redis user (examples/suppliers_keys.py).

Every write is one WATCH/MULTI transaction over the keys it reads (`suppliers:*`, examples/suppliers_keys.py):
a fence older than one seen for the task is refused first, so a stale lease holder can neither
write nor replay; a replayed op key gets the first outcome back, whatever its arguments; an injected
fault (`suppliers:{register}:faults:T`, a test hook: operation -> "refuse" or a count) fails the call, for
good or transiently, having done nothing. Registration is reversible: `undo` removes the supplier
once per op key, refuses while a payment is scheduled to it, and leaves a tombstone, so a
registration that lands after its own undo is refused rather than resurrected. A payment goes only
to the account on the supplier's master record. Times come from the Redis server's clock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import ClassVar, Literal, TypeVar, cast

import orjson
import redis
from pydantic import Field

from wakeful.core.errors import DownstreamRefused, DownstreamUnavailable, FencedOff
from wakeful.examples.suppliers_keys import (
    LOG,
    SUPPLIER_ID,
    call_key,
    faults_key,
    fence_key,
    master_key,
    undo_key,
)
from wakeful.schemas.base import Record
from wakeful.state.keys import CAS_RETRIES

ACCOUNT = r"^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$"  # IBAN-shaped: the workflow checks the checksum
REFUSE = b"refuse"  # a faults hash value: that operation fails for good
Operation = Literal["register", "schedule", "undo"]
_PAGE = 500
_Page = list[tuple[bytes, dict[bytes, bytes]]]  # XRANGE reply: (stream id, fields) in id order
_Pipe = redis.client.Pipeline


class _Outcome(Record):
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA
    op_key: str = Field(min_length=1, max_length=200)  # the caller's idempotency key
    task_id: str = Field(min_length=1, max_length=64)
    fence: int = Field(ge=0)  # the caller's fencing token when it wrote
    at: datetime  # the Redis server's clock, UTC


class Registration(_Outcome):
    """A supplier entered in the register under one op key."""

    KIND: ClassVar[str] = "supplier_registration"
    kind: Literal["registration"] = "registration"
    supplier_id: str = Field(pattern=f"^{SUPPLIER_ID}$")
    legal_name: str = Field(min_length=1, max_length=200)
    account: str = Field(pattern=ACCOUNT)


class Payment(_Outcome):
    """A supplier's first payment, scheduled under one op key to the account on record."""

    KIND: ClassVar[str] = "supplier_payment"
    kind: Literal["payment"] = "payment"
    payment_id: str = Field(pattern=r"^P-[0-9a-f]{16}$")
    supplier_id: str = Field(pattern=f"^{SUPPLIER_ID}$")
    account: str = Field(pattern=ACCOUNT)
    amount: int = Field(gt=0)  # minor units
    currency: str = Field(pattern=r"^[A-Z]{3}$")


class Removal(_Outcome):
    """The undo of the registration made under `op_key`; supplier_id None: nothing had landed."""

    KIND: ClassVar[str] = "supplier_removal"
    kind: Literal["removal"] = "removal"
    supplier_id: str | None = Field(default=None, pattern=f"^{SUPPLIER_ID}$")


class Supplier(Record):
    """The supplier master record: the one account a payment may go to."""

    KIND: ClassVar[str] = "supplier"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA
    supplier_id: str = Field(pattern=f"^{SUPPLIER_ID}$")
    legal_name: str = Field(min_length=1, max_length=200)
    account: str = Field(pattern=ACCOUNT)
    status: Literal["active", "removed"] = "active"
    payment: str | None = None  # the op key of its first payment, once scheduled


Entry = Registration | Payment | Removal
R = TypeVar("R", Registration, Payment, Removal)
_KINDS: dict[str, type[Registration] | type[Payment] | type[Removal]] = {
    "registration": Registration,
    "payment": Payment,
    "removal": Removal,
}


def decode(raw: bytes) -> Entry:
    kind = orjson.loads(raw).get("kind")
    return _KINDS[kind].decode(raw)


def _id(prefix: str, op_key: str) -> str:
    """An id derived from the op key alone: a replay can only ever name the same thing."""
    return f"{prefix}-{hashlib.sha256(op_key.encode()).hexdigest()[:16]}"


class Suppliers:
    """The register's API, for a client authenticated as the "suppliers" ACL user."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def register(
        self, op_key: str, task_id: str, fence: int, *, legal_name: str, account: str
    ) -> Registration:
        """Enter a supplier once per op key; a replay returns the first registration.

        Raises pydantic.ValidationError for a malformed request, FencedOff for a stale fence,
        DownstreamRefused once the op key was undone (or on an injected refusal), and
        DownstreamUnavailable on an injected transient fault; nothing is written then.
        """
        supplier_id = _id("S", op_key)
        master = master_key(supplier_id)

        def write(pipe: _Pipe, at: datetime) -> tuple[Registration, dict[str, bytes]]:
            if pipe.exists(undo_key(op_key)):
                raise DownstreamRefused(op_key, task_id, "this registration was undone before it landed")
            made = Registration(
                op_key=op_key,
                task_id=task_id,
                fence=fence,
                at=at,
                supplier_id=supplier_id,
                legal_name=legal_name,
                account=account,
            )
            record = Supplier(supplier_id=supplier_id, legal_name=legal_name, account=account)
            return made, {call_key(op_key): made.encode(), master: record.encode()}

        watched = [call_key(op_key), master, undo_key(op_key)]
        return self._write(
            Registration, "register", watched, write, op_key=op_key, task_id=task_id, fence=fence
        )

    def schedule(
        self,
        op_key: str,
        task_id: str,
        fence: int,
        *,
        supplier_id: str,
        account: str,
        amount: int,
        currency: str,
    ) -> Payment:
        """Schedule a supplier's first payment once per op key, only to its account on record."""
        master = master_key(supplier_id)

        def write(pipe: _Pipe, at: datetime) -> tuple[Payment, dict[str, bytes]]:
            raw = pipe.get(master)
            found = Supplier.decode(raw) if isinstance(raw, bytes) else None
            if found is None or found.status != "active":
                raise DownstreamRefused(op_key, task_id, f"no active supplier {supplier_id}")
            if found.account != account:
                raise DownstreamRefused(
                    op_key, task_id, f"{account!r} is not {supplier_id}'s account on record"
                )
            if found.payment is not None:
                raise DownstreamRefused(op_key, task_id, f"{supplier_id}'s first payment is {found.payment}")
            made = Payment(
                op_key=op_key,
                task_id=task_id,
                fence=fence,
                at=at,
                payment_id=_id("P", op_key),
                supplier_id=supplier_id,
                account=account,
                amount=amount,
                currency=currency,
            )
            paid = found.model_copy(update={"payment": op_key})
            return made, {call_key(op_key): made.encode(), master: paid.encode()}

        watched = [call_key(op_key), master]
        return self._write(Payment, "schedule", watched, write, op_key=op_key, task_id=task_id, fence=fence)

    def undo(self, op_key: str, task_id: str, fence: int) -> Removal:
        """Remove the supplier registered under `op_key`, once; a replay returns the first removal.
        Refused for good while a payment is scheduled to the supplier."""

        def write(pipe: _Pipe, at: datetime) -> tuple[Removal, dict[str, bytes]]:
            raw = pipe.get(call_key(op_key))
            if not isinstance(raw, bytes):  # a tombstone: a late registration is refused
                return Removal(op_key=op_key, task_id=task_id, fence=fence, at=at), {}
            made = Registration.decode(raw)
            master = master_key(made.supplier_id)
            pipe.watch(master)  # type: ignore[no-untyped-call]  # redis-py leaves watch() unannotated
            raw_master = pipe.get(master)
            if not isinstance(raw_master, bytes):
                raise DownstreamUnavailable(op_key, task_id, f"{made.supplier_id} has no master record yet")
            record = Supplier.decode(raw_master)
            if record.payment is not None:
                detail = f"{made.supplier_id} has a payment scheduled ({record.payment}): cancel it first"
                raise DownstreamRefused(op_key, task_id, detail)
            removed = Removal(
                op_key=op_key, task_id=task_id, fence=fence, at=at, supplier_id=made.supplier_id
            )
            gone = record.model_copy(update={"status": "removed"})
            return removed, {master: gone.encode()}

        watched = [undo_key(op_key), call_key(op_key)]
        return self._write(Removal, "undo", watched, write, op_key=op_key, task_id=task_id, fence=fence)

    def lookup(self, op_key: str) -> Registration | Payment | None:
        """What a register or schedule call under `op_key` did, or None if it never landed."""
        raw = self.client.get(call_key(op_key))
        return cast(Registration | Payment, decode(raw)) if isinstance(raw, bytes) else None

    def undone(self, op_key: str) -> Removal | None:
        raw = self.client.get(undo_key(op_key))
        return Removal.decode(raw) if isinstance(raw, bytes) else None

    def supplier(self, supplier_id: str) -> Supplier | None:
        raw = self.client.get(master_key(supplier_id))
        return Supplier.decode(raw) if isinstance(raw, bytes) else None

    def entries(self, task_id: str | None = None) -> list[Entry]:
        """Every outcome in the order written, or only those for one task."""
        out: list[Entry] = []
        start = "-"
        while True:
            page = cast(_Page, self.client.xrange(LOG, start, "+", count=_PAGE))
            out += [o for o in (decode(f[b"r"]) for _, f in page) if task_id is None or o.task_id == task_id]
            if len(page) < _PAGE:
                return out
            start = "(" + page[-1][0].decode()

    def _write(
        self,
        expect: type[R],
        operation: Operation,
        watched: list[str],
        write: Callable[[_Pipe, datetime], tuple[R, dict[str, bytes]]],
        *,
        op_key: str,
        task_id: str,
        fence: int,
    ) -> R:
        """WATCH -> read -> verify -> MULTI -> write -> EXEC, for one operation under one op key.
        `watched[0]` holds the operation's outcome; `write` reads what else it needs and returns
        the outcome and the other keys to set, or raises to write nothing."""
        result_key, fenced, faults = watched[0], fence_key(task_id), faults_key(task_id)
        for _ in range(CAS_RETRIES):
            # The server's clock, read before WATCH: a cluster's transaction pipeline sends only
            # commands that name its slot's keys.
            secs, usecs = self.client.time()
            with self.client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(*watched, fenced, faults)  # type: ignore[no-untyped-call]  # unannotated upstream
                    seen = pipe.get(fenced)
                    if seen is not None and fence < int(seen):
                        raise FencedOff(op_key, task_id, fence, int(seen))
                    done = pipe.get(result_key)
                    if isinstance(done, bytes):
                        first = decode(done)
                        if not isinstance(first, expect):
                            raise DownstreamRefused(op_key, task_id, f"the op key names a {first.kind}")
                        return first
                    fault = pipe.hget(faults, operation)
                    if fault == REFUSE:
                        raise DownstreamRefused(op_key, task_id, f"injected fault: {operation} refused")
                    if fault is not None and int(fault) > 0:
                        pipe.multi()
                        pipe.hincrby(faults, operation, -1)
                        pipe.execute()
                        raise DownstreamUnavailable(
                            op_key, task_id, f"injected fault, {int(fault) - 1} more to come"
                        )
                    outcome, sets = write(pipe, datetime.fromtimestamp(secs + usecs / 1e6, UTC))
                    pipe.multi()
                    for key, value in {result_key: outcome.encode(), **sets}.items():
                        pipe.set(key, value)
                    if seen is None or fence > int(seen):
                        pipe.set(fenced, fence)
                    pipe.xadd(LOG, {"r": outcome.encode()})
                    pipe.execute()
                    return outcome
                except redis.WatchError:
                    continue
        raise DownstreamUnavailable(op_key, task_id, f"{CAS_RETRIES} concurrent writers in a row")
