"""What the executor does with one proposal, pure (consumers/executor/ruling.py): one row per way
a handling can end, each named after the rule it keeps, with no server."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any

import orjson
import pytest
from retry_app import app

from wakeful.authority.freezes import Freeze
from wakeful.authority.revocations import Revocation, name
from wakeful.authority.snapshot import Snapshot
from wakeful.authority.switches import ToolSwitch, field_of
from wakeful.consumers.executor import ruling
from wakeful.consumers.executor.steps import Ran
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.events import Envelope
from wakeful.schemas.logs import ActionLogEntry, ActionStatus
from wakeful.schemas.proposals import Call, Proposal
from wakeful.sdk import Refuse, Review, Start
from wakeful.state import keys
from wakeful.workflow import engine

NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice"}), limit=1000, app=app.name, shipped=app.shipped_policy)
TOOL = "book_room"
SETTLED = Ran(TOOL, "BOOK:t-1:v1", {"booking_id": "b-1"}, {"room": "huddle"})


def created() -> Checkpoint:
    payload = {"room": "huddle", "day": "2030-06-03", "people": 3}
    moved = engine.create(app, "room_booking", Start("t-1", "rooms-desk", "default", payload, AUTH, NOW))
    assert isinstance(moved, engine.Moved)
    return moved.checkpoint


CP = created()


def envelope(cp: Checkpoint = CP, version: int | None = None, request: str | None = None) -> Envelope:
    at = cp.state_version if version is None else version
    return Envelope(
        message_id="m-1",
        task_id=cp.task_id,
        task_version=at,
        kind="proposal",
        created_at=NOW,
        trace_id="tr-1",
        in_reply_to=request or events.request_id(cp.task_id, at),
        payload={},
    )


def proposal(room: str = "huddle", **fields: Any) -> Proposal:
    args = {"task_id": CP.task_id, "room": room, "day": date(2030, 6, 3).isoformat()}
    return Proposal(tool=TOOL, args=args, rationale="r", model="m", **fields)


def with_auth(**fields: Any) -> Snapshot:
    return dataclasses.replace(AUTH, **fields)


def op_key(cp: Checkpoint = CP) -> str:
    tool = app.tool(TOOL)
    assert tool is not None
    return tool.key_for(cp.task_id, cp.business.version, cp.execution.step)


OFF = {field_of(app.name, TOOL): ToolSwitch(app.name, TOOL, "ops-lead", "2030-06-01T08:00:00Z", "outage")}
FROZEN = {"all": Freeze("all", "ops-lead", "incident", "2030-06-01T08:00:00Z")}
REVOKED = {
    name("default", engine.requester(CP)): Revocation(
        engine.requester(CP), "k-1", "ops", "lost", "2030-06-01"
    )
}


def begun(status: ActionStatus) -> dict[bytes, bytes]:
    entry = ActionLogEntry(
        op_key=op_key(), task_id=CP.task_id, status=status, tool=TOOL, fence=1, started_at=NOW
    )
    return {op_key().encode(): entry.encode()}


def moved(cp: Checkpoint) -> Checkpoint:
    """The task one change on."""
    return cp.model_copy(
        update={"versions": cp.versions.model_copy(update={"state_version": cp.state_version + 1})}
    )


# ---- admit: whether the proposal is its task's to carry out --------------------------------------


@pytest.mark.parametrize(
    ("cp", "env", "expected"),
    [
        pytest.param(CP, envelope(), None, id="a_proposal_answering_the_outstanding_request_is_admitted"),
        pytest.param(
            moved(CP),
            envelope(),
            ruling.Drop,
            id="a_proposal_for_an_older_version_is_dropped_not_dead_lettered",
        ),
        pytest.param(
            CP,
            envelope(version=CP.state_version + 1),
            ruling.DeadLetter,
            id="a_proposal_claiming_a_newer_version_is_dead_lettered",
        ),
        pytest.param(
            CP,
            envelope(request="propreq:t-1:elsewhere"),
            ruling.DeadLetter,
            id="a_proposal_answering_another_request_is_dead_lettered",
        ),
        pytest.param(
            CP.model_copy(update={"business": CP.business.model_copy(update={"workflow": "gone"})}),
            envelope(),
            ruling.Drop,
            id="a_task_of_a_workflow_this_release_lacks_is_left_to_the_gate",
        ),
    ],
)
def test_admit(cp: Checkpoint, env: Envelope, expected: type | None) -> None:
    admitted = ruling.admit(app, cp, env)
    assert (type(admitted) if admitted is not None else None) is expected


# ---- rule: what an admitted proposal does ---------------------------------------------------------

Check = Callable[[ruling.Ruling], bool]
ROWS: list[Any] = [
    (
        "a_step_already_run_completes_even_under_a_freeze_a_revocation_or_a_switch",
        dict(auth=with_auth(frozen=FROZEN, revoked=REVOKED, tool_switches=OFF), settled=SETTLED),
        lambda r: r == ruling.Close(SETTLED),
    ),
    (
        "a_frozen_task_takes_no_new_step",
        dict(auth=with_auth(frozen=FROZEN, revoked=REVOKED)),
        lambda r: r == ruling.Hold("all"),
    ),
    (
        "a_task_resting_on_a_revoked_signer_parks_before_any_new_step",
        dict(auth=with_auth(revoked=REVOKED, tool_switches=OFF)),
        lambda r: isinstance(r, ruling.Park) and r.event == "executor.needs_review" and "revoked" in r.reason,
    ),
    (
        "a_task_admitted_under_tools_the_deployed_app_lacks_is_quarantined",
        dict(cp=CP.model_copy(update={"versions": CP.versions.model_copy(update={"tool_catalog": "other"})})),
        lambda r: isinstance(r, ruling.Quarantine),
    ),
    (
        "a_proposal_the_workflow_refuses_is_recorded_and_asked_again",
        dict(proposal=proposal("garden")),
        lambda r: isinstance(r, ruling.Refused) and isinstance(r.decided, Refuse),
    ),
    (
        "a_proposal_whose_model_failed_for_good_goes_to_review",
        dict(proposal=proposal(failed="the model failed for good")),
        lambda r: isinstance(r, ruling.Refused) and isinstance(r.decided, Review),
    ),
    (
        "a_switched_off_tool_parks_the_step_before_its_intent",
        dict(auth=with_auth(tool_switches=OFF)),
        lambda r: (
            isinstance(r, ruling.Park) and r.event == "executor.tool_disabled" and r.logged["tool"] == TOOL
        ),
    ),
    (
        "a_step_begun_before_its_tool_was_switched_off_goes_on",
        dict(auth=with_auth(tool_switches=OFF), ops=begun(ActionStatus.IN_FLIGHT)),
        lambda r: isinstance(r, ruling.Run),
    ),
    (
        "a_step_that_failed_before_meets_the_switch_when_it_begins_anew",
        dict(auth=with_auth(tool_switches=OFF), ops=begun(ActionStatus.FAILED)),
        lambda r: isinstance(r, ruling.Park) and r.event == "executor.tool_disabled",
    ),
    (
        "an_effect_may_not_share_a_turn_as_a_read_only_call",
        dict(proposal=proposal(more=(Call(tool=TOOL, args={}),))),
        lambda r: isinstance(r, ruling.Refused) and isinstance(r.decided, Refuse),
    ),
    (
        "a_proposal_that_passes_every_check_runs_its_step_under_its_op_key",
        {},
        lambda r: isinstance(r, ruling.Run) and r.effect.op_key == op_key() and r.more == (),
    ),
]


@pytest.mark.parametrize(("given", "check"), [pytest.param(g, c, id=i) for i, g, c in ROWS])
def test_rule(given: dict[str, Any], check: Check) -> None:
    cp, prop = given.get("cp", CP), given.get("proposal", proposal())
    decided = ruling.rule(
        app,
        cp,
        prop,
        ops=given.get("ops", {}),
        auth=given.get("auth", AUTH),
        now=NOW,
        settled=given.get("settled"),
    )
    assert check(decided), decided


def test_a_refusal_and_a_park_are_recorded_under_the_runtimes_own_ids_never_the_proposals() -> None:
    refused = ruling.rule(app, CP, proposal("garden"), ops={}, auth=AUTH, now=NOW, settled=None)
    off = ruling.rule(app, CP, proposal(), ops={}, auth=with_auth(tool_switches=OFF), now=NOW, settled=None)
    assert isinstance(refused, ruling.Refused) and isinstance(off, ruling.Park)
    assert refused.message_id == keys.runtime_id("refused", CP.task_id, CP.state_version)
    assert off.message_id == keys.runtime_id("review", op_key(), CP.state_version)
    assert orjson.loads(orjson.dumps(dict(off.detail)))["refused"] == off.reason  # the outbox record's
