"""The executor's heartbeat (D61): when a lease is renewed and when it is given up for lost, the
thread that applies those rules, and the decision that retries an unavailable tool later, without
the lease, instead of sleeping under it."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pay_tool import Pay

from wakeful.consumers.executor import steps as executor_steps
from wakeful.consumers.executor.heartbeat import (
    Beat,
    Heartbeats,
    Lost,
    Renewal,
    next_beat,
    period_s,
)
from wakeful.core.errors import LeaseLost
from wakeful.core.log import Log
from wakeful.core.process import wait_until
from wakeful.schemas.logs import ActionLogEntry, ActionStatus
from wakeful.state.lease import Lease

TTL_MS = 15_000


@pytest.mark.parametrize(
    ("outcome", "now", "renewed_at", "expected"),
    [
        (Renewal.RENEWED, 5.0, 5.0, Beat(5.0)),  # every third of the ttl
        (Renewal.TAKEN, 5.0, 0.0, Lost("the lease lapsed or another worker took it before it was renewed")),
        (Renewal.FAILED, 5.0, 0.0, Beat(5.0)),  # 10 s left: try again at the usual beat
        (Renewal.FAILED, 10.0, 0.0, Beat(2.5)),  # 5 s left: try again halfway to the lapse
        (Renewal.FAILED, 14.99, 0.0, Lost("no renewal reached Redis within the lease's ttl (15000 ms)")),
        (Renewal.FAILED, 16.0, 0.0, Lost("no renewal reached Redis within the lease's ttl (15000 ms)")),
    ],
)
def test_a_lease_is_renewed_each_third_of_its_ttl_and_given_up_when_taken_or_unreachable_for_a_ttl(
    outcome: Renewal, now: float, renewed_at: float, expected: Beat | Lost
) -> None:
    assert next_beat(outcome, now, renewed_at, TTL_MS) == expected


def test_the_renewal_period_is_a_third_of_the_ttl() -> None:
    assert period_s(15_000) == 5.0 and period_s(300) == 0.1


@given(
    ttl_ms=st.integers(100, 3_600_000),
    since=st.floats(0, 3_600, allow_nan=False),
    outcome=st.sampled_from(list(Renewal)),
)
def test_the_next_renewal_always_comes_before_the_lease_could_lapse(
    ttl_ms: int, since: float, outcome: Renewal
) -> None:
    """Whatever happened, either the heartbeat stops, or its next try is due while the lease it
    last renewed still lives (a lost one is never renewed on hope)."""
    decided = next_beat(outcome, now=since, renewed_at=0.0, ttl_ms=ttl_ms)
    if outcome is Renewal.TAKEN:
        assert isinstance(decided, Lost)
    elif outcome is Renewal.RENEWED:
        assert decided == Beat(period_s(ttl_ms))
    elif isinstance(decided, Beat):
        assert decided.wait_s > 0 and since + decided.wait_s < ttl_ms / 1000


class Renewals:
    """A stand-in for Leases: counts renewals; from `fail_at` on, raises `error`."""

    def __init__(self, fail_at: int | None = None, error: Exception | None = None) -> None:
        self.calls = 0
        self.fail_at = fail_at
        self.error = error
        self.lock = threading.Lock()

    def extend(self, lease: Lease) -> Lease:
        with self.lock:
            self.calls += 1
            if self.fail_at is not None and self.calls >= self.fail_at and self.error is not None:
                raise self.error
        return lease


def lease(ttl_ms: int) -> Lease:
    return Lease("t-1", "w-1", 7, ttl_ms)


def test_a_stopped_heartbeat_renews_nothing_more() -> None:
    renewals = Renewals()
    heartbeats = Heartbeats(renewals, log=Log(role="test"))
    with heartbeats.beating(lease(30)) as pulse:
        assert wait_until(lambda: renewals.calls >= 3, 10, interval=0.005)
    after = renewals.calls  # stopped: none in flight, and none to come
    with heartbeats.beating(lease(30_000)):  # the thread goes on for other leases
        pass
    assert renewals.calls == after and pulse.lost is None and pulse.renewals == after
    pulse.check()  # held at every beat: nothing to raise


def test_one_thread_renews_every_lease_in_flight_each_on_its_own_beat() -> None:
    renewals = Renewals()
    heartbeats = Heartbeats(renewals, log=Log(role="test"))
    with heartbeats.beating(lease(30)) as fast, heartbeats.beating(lease(600_000)) as slow:
        assert wait_until(lambda: fast.renewals >= 3, 10, interval=0.005)
    assert slow.renewals == 0 and fast.renewals >= 3
    assert [t.name for t in threading.enumerate()].count("lease-heartbeat") >= 1


def test_a_renewal_that_finds_the_lease_taken_stops_the_heartbeat_and_records_it() -> None:
    taken = LeaseLost("t-1", "w-1:7", "expired or taken before it was extended")
    renewals = Renewals(fail_at=2, error=taken)
    with Heartbeats(renewals, log=Log(role="test")).beating(lease(30)) as pulse:
        assert wait_until(lambda: pulse.lost is not None, 10, interval=0.005)
        assert wait_until(lambda: not pulse.renewing, 10, interval=0.005)
    assert renewals.calls == 2 and pulse.renewals == 1  # no renewal after the one that found it gone
    with pytest.raises(LeaseLost, match="another worker took it"):
        pulse.check()


def test_a_redis_that_never_answers_loses_the_lease_once_its_ttl_has_passed() -> None:
    renewals = Renewals(fail_at=1, error=ConnectionError("refused"))
    with Heartbeats(renewals, log=Log(role="test")).beating(lease(60)) as pulse:
        assert wait_until(lambda: pulse.lost is not None, 10, interval=0.005)
    assert "within the lease's ttl" in (pulse.lost or "") and renewals.calls >= 2  # retried first
    with pytest.raises(LeaseLost):
        pulse.check()


# ---- the retry of an unavailable tool: later, without the lease --------------------------------


@pytest.mark.parametrize("tried", [1, 2])
def test_an_unavailable_tool_is_retried_later_while_calls_remain(tried: int) -> None:
    wait = executor_steps.after_unavailable(Pay(), tried, "timeout")
    assert isinstance(wait, float) and 0 < wait <= 5.0


@pytest.mark.parametrize("tried", [3, 4])
def test_an_unavailable_tool_fails_for_good_after_its_attempts_across_every_handling(tried: int) -> None:
    assert Pay.attempts == 3
    failed = executor_steps.after_unavailable(Pay(), tried, "timeout")
    assert failed == f"bank unavailable after {tried} attempts: timeout"


def test_call_once_makes_one_call_and_never_sleeps_on_an_unavailable_tool() -> None:
    from wakeful.sdk.tools import ToolUnavailable

    calls: list[int] = []

    def attempt() -> dict[str, str]:
        calls.append(1)
        raise ToolUnavailable("503")

    outcome = executor_steps.call_once(Pay(), "PAY:t-1:v1", attempt, lease(15_000))
    assert outcome == executor_steps.Unavailable("503") and len(calls) == 1


def test_an_action_log_entry_stored_before_attempts_were_counted_reads_as_attempt_zero() -> None:
    v1 = {
        "schema_version": 1,
        "op_key": "PAY:t-1:v1",
        "task_id": "t-1",
        "status": "in_flight",
        "fence": 3,
        "started_at": datetime(2026, 3, 1, tzinfo=UTC).isoformat(),
    }
    entry = ActionLogEntry.decode(orjson.dumps(v1))
    assert (entry.attempts, entry.status, entry.schema_version) == (0, ActionStatus.IN_FLIGHT, 2)
    counted = entry.model_copy(update={"attempts": 2})
    assert ActionLogEntry.decode(counted.encode()).attempts == 2
