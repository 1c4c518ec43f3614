"""A tool's calls per second and calls at once as pure rules (workflow/rates.py, D109, D111): which
record holds a tool,
what a damaged record holds it to, what a record may say, and that a tool's rate counts no
tenant's tasks. The count on a real Redis: tests/test_functions.py; on worker processes:
tests/test_reproposals_stack.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from wakeful.authority.limit_store import (
    MAX_RATE,
    MIN_RATE,
    checked_scope,
    counting,
    encode,
    encode_rate,
    scope_of,
    tool_scope,
)
from wakeful.authority.snapshot import Snapshot
from wakeful.core.errors import ConfigError
from wakeful.examples.refund import app as refund_app
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk import Start
from wakeful.sdk.workflow import Refuse
from wakeful.workflow import engine, limits, rates

pytestmark = pytest.mark.timeout(30)
AT = "2030-06-01T09:00:00Z"
NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
SCOPE = tool_scope("refund", "issue_refund")


def task(stage: str) -> Checkpoint:
    auth = Snapshot(approvers=frozenset({"alice"}), limit=1000)
    made = engine.create(refund_app, "refund", Start("t-1", "desk", "acme", {"amount": 5}, auth, NOW))
    assert not isinstance(made, Refuse)
    cp = made.checkpoint
    return cp.model_copy(update={"business": cp.business.model_copy(update={"stage": stage})})


def rate(calls: float, burst: int) -> str:
    return encode_rate(calls, burst, by="ops-lead", at=AT, reason="the bank's API")


@pytest.mark.parametrize(
    ("stored", "held_to"),
    [
        ({}, None),  # no record: its calls are not counted
        ({SCOPE: rate(5, 5)}, (5.0, 5, "")),
        ({SCOPE: rate(0.5, 1)}, (0.5, 1, "")),
        ({tool_scope("refund", "other"): rate(5, 5)}, None),  # another tool's
        ({tool_scope("shop", "issue_refund"): rate(5, 5)}, None),  # another app's tool of the name
        ({scope_of("acme"): encode(3, by="x", at=AT, reason="")}, None),  # a tenant's limit
        ({SCOPE: "not json"}, (rates.DAMAGED_RATE, 1, "not JSON")),
        ({SCOPE: "[5]"}, (rates.DAMAGED_RATE, 1, "not a JSON object")),
        ({SCOPE: '{"calls_per_s": 0, "burst": 1}'}, (rates.DAMAGED_RATE, 1, "calls_per_s is 0")),
        ({SCOPE: '{"calls_per_s": true, "burst": 1}'}, (rates.DAMAGED_RATE, 1, "calls_per_s is True")),
        ({SCOPE: '{"calls_per_s": 5, "burst": 0}'}, (rates.DAMAGED_RATE, 1, "burst is 0")),
        ({SCOPE: '{"calls_per_s": 5, "burst": 2.5}'}, (rates.DAMAGED_RATE, 1, "burst is 2.5")),
    ],
)
def test_the_record_that_holds_a_tool_and_a_damaged_one_never_lifts_it(
    stored: dict[str, str], held_to: tuple[float, int, str] | None
) -> None:
    found = rates.rate_of(stored, "refund", "issue_refund")
    if held_to is None:
        assert found is None
    else:
        assert found is not None and (found.calls_per_s, found.burst) == held_to[:2]
        assert found.damaged.startswith(held_to[2]) and bool(found.damaged) == bool(held_to[2])


D = rates.DAMAGED_AT_ONCE


@pytest.mark.parametrize(
    ("raw", "held_to"),
    [
        (encode_rate(None, None, max_in_flight=3, by="x", at=AT, reason=""), (None, 3, "")),
        (encode_rate(2, 1, max_in_flight=3, by="x", at=AT, reason=""), (2.0, 3, "")),
        (encode_rate(2, 1, by="x", at=AT, reason=""), (2.0, None, "")),  # calls a second only
        ('{"max_in_flight": 0}', (rates.DAMAGED_RATE, D, "max_in_flight is 0")),
        ('{"max_in_flight": 2.5}', (rates.DAMAGED_RATE, D, "max_in_flight is 2.5")),
        ('{"max_in_flight": true}', (rates.DAMAGED_RATE, D, "max_in_flight is True")),
        ('{"max_in_flight": 3, "calls_per_s": -1}', (rates.DAMAGED_RATE, D, "calls_per_s is -1")),
        ('{"by": "x"}', (rates.DAMAGED_RATE, D, "it names neither")),  # holds nothing: never lifts
        ("not json", (rates.DAMAGED_RATE, D, "not JSON")),
    ],
)
def test_a_tools_calls_at_once_are_read_beside_its_rate_and_a_damaged_record_holds_both(
    raw: str, held_to: tuple[float | None, int | None, str]
) -> None:
    found = rates.rate_of({SCOPE: raw}, "refund", "issue_refund")
    assert found is not None and (found.calls_per_s, found.max_in_flight) == held_to[:2]
    assert found.damaged.startswith(held_to[2]) and bool(found.damaged) == bool(held_to[2])


@pytest.mark.parametrize(
    ("calls", "at_once", "option"),
    [
        (None, None, "--calls-per-s"),
        (None, 0, "--max-in-flight"),
        (None, True, "--max-in-flight"),
        (2, 10**9, "--max-in-flight"),
    ],
)
def test_a_tools_record_names_its_rate_its_calls_at_once_or_both_in_range(
    calls: float | None, at_once: int | None, option: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        encode_rate(calls, 1, max_in_flight=at_once, by="x", at=AT, reason="")
    assert refused.value.setting == option


@pytest.mark.parametrize(
    ("calls", "burst", "option"),
    [
        (0, 1, "--calls-per-s"),
        (MIN_RATE / 2, 1, "--calls-per-s"),
        (MAX_RATE * 2, 1, "--calls-per-s"),
        (True, 1, "--calls-per-s"),
        (5, 0, "--burst"),
        (5, True, "--burst"),
    ],
)
def test_a_rate_out_of_range_is_refused_naming_its_option(calls: float, burst: int, option: str) -> None:
    with pytest.raises(ConfigError) as refused:
        rate(calls, burst)
    assert refused.value.setting == option


@pytest.mark.parametrize(
    ("scope", "ok"),
    [
        ("tool:refund:issue_refund", True),
        ("tool:refund", False),  # no tool
        ("tool:refund:a:b", False),  # a name may hold no colon
        ("tool:refund:bad name", False),
        ("tenant:acme", True),
        ("default", True),
    ],
)
def test_a_scope_names_a_tenant_the_default_or_one_tool_of_one_app(scope: str, ok: bool) -> None:
    if ok:
        assert checked_scope(scope) == scope
    else:
        with pytest.raises(ConfigError):
            checked_scope(scope)


def test_a_tools_rate_counts_no_tenants_tasks_and_lists_after_the_limits() -> None:
    stored = {SCOPE: rate(5, 5)}
    assert not counting(stored) and not counting({SCOPE.encode(): b"{}"})
    assert counting({**stored, scope_of("acme"): encode(3, by="x", at=AT, reason="")})
    assert limits.applying(stored, "acme") is None
    closed = task("closed")
    assert not limits.frees(refund_app, closed, stored)  # nothing counted: nothing to give back
    assert limits.frees(refund_app, closed, {**stored, scope_of("acme"): encode(3, by="x", at=AT, reason="")})
    every = limits.every({**stored, "default": encode(9, by="x", at=AT, reason="")})
    assert [type(r).__name__ for r in every] == ["Limit", "Rate"]


@pytest.mark.parametrize(("calls", "burst"), [(0.2, 1), (1, 1), (5, 5), (2.5, 2), (1e9, 100_000)])
def test_a_rate_with_no_burst_named_lets_a_seconds_calls_go_at_once(calls: float, burst: int) -> None:
    assert rates.default_burst(calls) == burst
