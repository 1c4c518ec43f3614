"""The reference bank: one booking per op key, stale fences refused, faults book nothing."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import pydantic
import pytest
import redis
from helpers import command, downstream_as
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from wakeful.core.errors import DownstreamUnavailable, FencedOff
from wakeful.core.settings import Settings
from wakeful.examples import bank as ledger
from wakeful.examples.bank import Bank, LedgerEntry
from wakeful.state import acl, keys

NOPERM = redis.exceptions.NoPermissionError


@pytest.fixture(scope="module")
def bank_client(settings: Settings, redis_url: str) -> redis.Redis:
    return downstream_as(settings, "bank")


@pytest.fixture(scope="module")
def admin_client(settings: Settings, redis_url: str) -> redis.Redis:
    return acl.connect(settings, "admin")


@pytest.fixture(scope="module")
def bank(bank_client: redis.Redis) -> Bank:
    return Bank(bank_client)


@pytest.fixture()
def task() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def booking_order(entry: LedgerEntry) -> tuple[int, int]:
    ms, seq = entry.entry_id.removeprefix("L-").split("-")
    return int(ms), int(seq)


def test_concurrent_refunds_with_one_op_key_book_exactly_one_entry(bank: Bank, task: str) -> None:
    op = f"REFUND:{task}:v1"
    start = threading.Barrier(20)
    results: list[LedgerEntry] = []
    errors: list[BaseException] = []

    def call() -> None:
        start.wait()
        try:
            results.append(bank.refund(op, task, 2500, "EUR", fence=1))
        except BaseException as exc:  # reported below; a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 20 and len(set(results)) == 1
    assert bank.entries(task) == [results[0]]


def test_replay_of_an_op_key_returns_the_first_booking_and_books_nothing(bank: Bank, task: str) -> None:
    op = f"REFUND:{task}:v1"
    first = bank.refund(op, task, 1000, "EUR", fence=3)
    replay = bank.refund(op, task, 9999, "USD", fence=4)  # the first booking wins
    assert replay == first
    assert (replay.amount, replay.currency, replay.fence) == (1000, "EUR", 3)
    assert bank.entries(task) == [first]


def test_stale_fence_is_refused_and_moves_no_money(bank: Bank, task: str) -> None:
    booked = bank.refund(f"REFUND:{task}:v1", task, 100, "EUR", fence=5)
    with pytest.raises(FencedOff) as refused:
        bank.refund(f"REFUND:{task}:v2", task, 100, "EUR", fence=4)
    assert (refused.value.fence, refused.value.seen, refused.value.task_id) == (4, 5, task)
    assert bank.lookup(f"REFUND:{task}:v2") is None
    same_fence = bank.refund(f"REFUND:{task}:v3", task, 100, "EUR", fence=5)  # the holder goes on
    newer = bank.refund(f"REFUND:{task}:v4", task, 100, "EUR", fence=7)
    with pytest.raises(FencedOff):
        bank.refund(f"REFUND:{task}:v5", task, 100, "EUR", fence=6)  # the bank now knows fence 7
    assert bank.entries(task) == [booked, same_fence, newer]


def test_injected_faults_fail_the_first_calls_then_book_exactly_once(
    bank: Bank, task: str, redis_client: redis.Redis
) -> None:
    op = f"REFUND:{task}:v1"
    redis_client.set(ledger.faults_key(task), 2)
    for _ in range(2):
        with pytest.raises(DownstreamUnavailable) as refused:
            bank.refund(op, task, 700, "EUR", fence=1)
        assert refused.value.op_key == op
        assert bank.lookup(op) is None and bank.entries(task) == []
    booked = bank.refund(op, task, 700, "EUR", fence=1)
    assert bank.refund(op, task, 700, "EUR", fence=1) == booked
    assert bank.entries(task) == [booked]
    assert redis_client.get(ledger.faults_key(task)) == b"0"


def test_lookup_finds_a_booking_by_key_and_nothing_for_an_unknown_key(bank: Bank, task: str) -> None:
    booked = bank.refund(f"REFUND:{task}:v1", task, 4200, "GBP", fence=2)
    assert bank.lookup(f"REFUND:{task}:v1") == booked
    assert bank.lookup(f"REFUND:{task}:v404") is None


def test_entries_lists_only_one_tasks_bookings_in_booking_order(
    bank: Bank, task: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = f"t-{uuid.uuid4().hex[:12]}"
    mine: list[LedgerEntry] = []
    for version in range(1, 6):
        mine.append(bank.refund(f"REFUND:{task}:v{version}", task, 100 * version, "EUR", fence=1))
        bank.refund(f"REFUND:{other}:v{version}", other, 5, "EUR", fence=1)
    assert bank.entries(task) == mine
    assert [booking_order(e) for e in mine] == sorted(booking_order(e) for e in mine)
    assert [e.amount for e in bank.entries(other)] == [5] * 5
    everything = bank.entries()
    assert [e for e in everything if e.task_id == task] == mine
    monkeypatch.setattr(ledger, "_PAGE", 2)  # pages end mid-task: the listing must not skip or repeat
    assert bank.entries(task) == mine


def test_booking_time_is_the_redis_servers_clock(bank: Bank, task: str, redis_client: redis.Redis) -> None:
    def server_now() -> datetime:
        seconds, micros = redis_client.time()
        return datetime.fromtimestamp(seconds, UTC).replace(microsecond=micros)

    before = server_now()
    booked = bank.refund(f"REFUND:{task}:v1", task, 100, "EUR", fence=1)
    after = server_now()
    assert before <= booked.booked_at <= after
    assert booked.booked_at.utcoffset() == timedelta(0)


@hsettings(max_examples=200, deadline=None)
@given(
    seconds=st.integers(min_value=0, max_value=253_402_300_799),  # 1970 .. 9999-12-31T23:59:59
    micros=st.integers(min_value=0, max_value=999_999),
)
def test_lua_calendar_matches_python_for_every_date(
    admin_client: redis.Redis, seconds: int, micros: int
) -> None:
    # The helper alone, run by the admin: the bank's credential may run no Lua of its own.
    script = ledger._ISO_UTC + "return iso_utc(ARGV[1], ARGV[2])"
    formatted = command(admin_client, "EVAL", script, "0", str(seconds), str(micros))
    expected = datetime.fromtimestamp(seconds, UTC).replace(microsecond=micros)
    assert formatted.decode() == expected.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.mark.parametrize(
    ("amount", "currency", "fence"),
    [(0, "EUR", 1), (-5, "EUR", 1), (True, "EUR", 1), (5, "eur", 1), (5, "EUR", -1)],
)
def test_malformed_refund_is_refused_before_anything_is_booked(
    bank: Bank, task: str, amount: int, currency: str, fence: int
) -> None:
    with pytest.raises(pydantic.ValidationError):
        bank.refund(f"REFUND:{task}:v1", task, amount, currency, fence)
    assert bank.lookup(f"REFUND:{task}:v1") is None and bank.entries(task) == []


@pytest.mark.parametrize("role", ["proposer", "gate"])
def test_other_roles_cannot_touch_bank_keys(
    settings: Settings, role: str, task: str, redis_client: redis.Redis
) -> None:
    client = acl.connect(settings, role)
    op = f"REFUND:{task}:v1"
    for args in (
        ("GET", ledger.entry_key(op)),
        ("SET", ledger.entry_key(op), "{}"),
        ("SET", ledger.fence_key(task), "0"),
        ("XADD", ledger.LEDGER, "*", "e", "{}"),
        ("XRANGE", ledger.LEDGER, "-", "+"),
    ):
        with pytest.raises(NOPERM):
            command(client, *args)
    with pytest.raises(NOPERM):
        Bank(client).refund(op, task, 100, "EUR", fence=1)
    assert redis_client.exists(ledger.entry_key(op), ledger.fence_key(task)) == 0


def test_bank_credential_reaches_no_task_state(bank_client: redis.Redis, task: str) -> None:
    for args in (("GET", keys.state(task)), ("HGET", keys.ops(task), "x"), ("SET", keys.fence(task), "9")):
        with pytest.raises(NOPERM):
            command(bank_client, *args)


def test_stale_lease_holder_is_refused_even_a_replay_of_its_own_key(bank: Bank, task: str) -> None:
    op = f"REFUND:{task}:v1"
    booked = bank.refund(op, task, 100, "EUR", fence=8)  # the newer holder booked it
    with pytest.raises(FencedOff):
        bank.refund(op, task, 100, "EUR", fence=7)  # the paused older holder wakes up and retries
    assert bank.entries(task) == [booked]
