"""Tools as authority data (D57): a tool an operator turned off is refused before its step's intent
is written, and only then; a switch record is read the way it was written, and one that cannot be
read still keeps its tool off; what the catalog publishes of each tool moves with its contract and
its wording, each apart."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pay_tool import Pay

from wakeful.authority import switches
from wakeful.authority.snapshot import SNAPSHOT_READS, Snapshot, snapshot_from
from wakeful.authority.switches import ToolSwitch, checked_words, field_of, switches_from
from wakeful.core.errors import ConfigError
from wakeful.schemas.logs import ActionStatus
from wakeful.sdk.tools import Tool, published
from wakeful.state import keys
from wakeful.workflow.switches import refused

OFF = ToolSwitch("refund", "refund", "ops-lead", "2026-12-01T20:00:00Z", "bank outage")


def live(*off: ToolSwitch) -> Snapshot:
    return Snapshot(approvers=frozenset(), limit=0, tool_switches={field_of(s.app, s.tool): s for s in off})


@pytest.mark.parametrize(
    ("auth", "app", "tool", "intent", "parked"),
    [
        (live(), "refund", "refund", None, False),  # nothing is off
        (live(OFF), "refund", "refund", None, True),  # off, no intent yet: refused before it
        (live(OFF), "refund", "refund", ActionStatus.FAILED, True),  # a failed step begins anew: refused
        (live(OFF), "refund", "refund", ActionStatus.IN_FLIGHT, False),  # begun before the switch: goes on
        (live(OFF), "refund", "refund", ActionStatus.SUCCEEDED, False),  # done before: it closes
        (live(OFF), "refund", "lookup", None, False),  # another tool of the app
        (live(OFF), "onboarding", "refund", None, False),  # the same name in another app
    ],
)
def test_a_disabled_tool_is_refused_only_before_its_intent(
    auth: Snapshot, app: str, tool: str, intent: ActionStatus | None, parked: bool
) -> None:
    decided = refused(app, tool, intent, auth)
    assert (decided is not None) is parked
    if decided is not None:
        assert decided.switch == OFF
        for said in ("tool refund", "ops-lead", "bank outage", "2026-12-01T20:00:00Z", "tools enable refund"):
            assert said in decided.reason, said
        assert decided.detail()["switch_by"] == "ops-lead" and decided.detail()["refused"] == decided.reason


def raw(app: Any, tool: Any) -> bytes:
    return orjson.dumps([app, tool])


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ({}, {}),
        (
            {field_of("refund", "refund").encode(): switches.encode(OFF)},
            {field_of("refund", "refund"): OFF},
        ),
        # A record this code cannot read keeps its tool off, saying so.
        (
            {field_of("a", "pay").encode(): b"not json"},
            {field_of("a", "pay"): ToolSwitch("a", "pay", "?", "?", "unreadable switch record b'not json'")},
        ),
        ({field_of("a", "pay").encode(): b'{"by": "x"}'}, {field_of("a", "pay"): ("a", "pay", "?")}),
        ({b"not a pair": switches.encode(OFF)}, {}),  # no field_of() makes it: it names no tool
    ],
)
def test_switch_records_read_as_written_and_an_unreadable_one_keeps_its_tool_off(
    reply: dict[bytes, bytes], expected: dict[str, Any]
) -> None:
    found = switches_from(reply)
    assert found.keys() == expected.keys()
    for field, want in expected.items():
        got = found[field]
        if isinstance(want, tuple):
            assert (got.app, got.tool, got.by) == want
        else:
            assert got == want


def test_a_field_names_one_app_and_tool_whatever_their_names_hold() -> None:
    pairs = [("a/b", "c"), ("a", "b/c"), ('a"', "b"), ("a", '"b'), ("a|b", "c"), ("a", "b|c")]
    assert len({field_of(app, tool) for app, tool in pairs}) == len(pairs)
    for app, tool in pairs:
        assert orjson.loads(field_of(app, tool)) == [app, tool]


def test_the_snapshot_reads_the_switches_with_the_rest_of_authority() -> None:
    assert ("HGETALL", keys.AUTH_TOOL_SWITCHES) in SNAPSHOT_READS
    replies: list[Any] = [
        set(),
        None,
        {},
        {},
        {},
        {field_of("refund", "refund").encode(): switches.encode(OFF)},
        {},  # the tenants' in-flight limits (D108)
    ]
    assert len(replies) == len(SNAPSHOT_READS)
    auth = snapshot_from(replies)
    assert auth.tool_switch("refund", "refund") == OFF and auth.tool_switch("refund", "other") is None


@pytest.mark.parametrize(
    ("by", "reason", "needed", "problem"),
    [
        ("ops-lead", "bank outage", True, None),
        ("ops-lead", "", False, None),
        ("ops-lead", "  ", True, "--reason"),
        ("", "why", True, "--by"),
        ("ops lead", "why", True, "--by"),
        ("x" * 129, "why", True, "--by"),
        ("ops-lead", "y" * 501, True, "--reason"),
    ],
)
def test_who_and_why_are_checked_before_anything_is_written(
    by: str, reason: str, needed: bool, problem: str | None
) -> None:
    if problem is None:
        assert checked_words(by, reason, reason_needed=needed) == (by, reason)
        return
    with pytest.raises(ConfigError) as raised:
        checked_words(by, reason, reason_needed=needed)
    assert raised.value.setting == problem


def variant(**changed: Any) -> Tool[Any]:
    later: type[Tool[Any]] = type("PayLater", (Pay,), changed)
    return later()


@pytest.mark.parametrize(
    ("changed", "contract_moves", "wording_moves"),
    [
        ({}, False, False),
        ({"description": "Pay the supplier once, and tell them."}, False, True),
        ({"egress": ("bank", "mail")}, False, True),
        ({"stages": ("ready", "approved")}, True, False),
        ({"reversible": True}, True, False),
        ({"op_key": "PAY:{task_id}:{version}"}, True, False),
    ],
)
def test_the_published_catalog_moves_each_tools_contract_and_wording_apart(
    changed: dict[str, Any], contract_moves: bool, wording_moves: bool
) -> None:
    [before], [after] = published([Pay()]), published([variant(**changed)])
    assert (before["contract"] != after["contract"]) is contract_moves
    assert (before["wording"] != after["wording"]) is wording_moves
    assert after["name"] == "pay" and after["stages"] == list(changed.get("stages", ("ready",)))
    assert after["reversible"] is changed.get("reversible", False)
