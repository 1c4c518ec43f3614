"""The tutorial agent (docs/agents.md, wakeful.examples.tutorial) without Kafka or Redis: the page
shows the module exactly, its decisions, its tool, and the runtime's pure rules driving it."""

from __future__ import annotations

import ast
import dataclasses
import re
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from wakeful.authority.snapshot import Snapshot
from wakeful.consumers.inbound import main as inbound
from wakeful.core.settings import Settings
from wakeful.examples import tutorial
from wakeful.examples.tutorial import (
    AWAITING_APPROVAL,
    READY,
    BookArgs,
    Booking,
    BookRoom,
    app,
    booked,
    check,
    rooms,
    start,
)
from wakeful.producers.keys import public_bytes
from wakeful.producers.signing import Ed25519Signer, sign_event
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.signatures import VerifyKey
from wakeful.sdk import (
    APPROVERS,
    CLOSED,
    NEEDS_REVIEW,
    App,
    Context,
    Effect,
    Next,
    Refuse,
    Review,
    Start,
    ToolRefused,
    Wait,
    load_app,
)
from wakeful.workflow import effects, engine, wakes

ROOT = Path(__file__).resolve().parents[2]
DOC, MODULE = ROOT / "docs/agents.md", ROOT / "examples/tutorial.py"
NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
DAY = date(2030, 6, 3)
AUTH = Snapshot(approvers=frozenset({"alice", "bob"}), limit=1000, app="rooms", shipped=app.shipped_policy)


def code_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# ---- the page is the module -----------------------------------------------------------------


def test_the_page_shows_every_line_of_the_tutorial_module_in_order() -> None:
    blocks = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(), flags=re.DOTALL | re.MULTILINE)
    assert blocks, "docs/agents.md has no python blocks"
    assert code_lines("".join(blocks)) == code_lines(MODULE.read_text())


def test_the_page_shows_the_tutorial_policy_file_whole() -> None:
    blocks = re.findall(r"^```cedar\n(.*?)^```$", DOC.read_text(), flags=re.DOTALL | re.MULTILINE)
    assert blocks == [(MODULE.parent / "tutorial.cedar").read_text()]


def test_the_agent_is_well_under_a_hundred_lines_of_code_besides_its_imports() -> None:
    tree = ast.parse(MODULE.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom | ast.Expr):  # imports, and docstrings
            skip |= set(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    lines = MODULE.read_text().splitlines()
    code = [
        n
        for n, line in enumerate(lines, 1)
        if line.strip() and not line.strip().startswith("#") and n not in skip
    ]
    assert 70 <= len(code) <= 90, f"{len(code)} lines of code; docs/agents.md says about 80"


def test_the_app_the_page_runs_loads_as_the_roles_load_it() -> None:
    assert load_app("wakeful.examples.tutorial:app") is app
    assert [wf.name for wf in app.workflows] == ["room_booking"]
    assert app.kinds == {
        events.CREATE,
        events.APPROVE,
        events.RUN,
        events.REOPEN,
        events.COMPLETE,
        events.REPLAY,
        events.CANCEL,
    }


# ---- the decisions --------------------------------------------------------------------------


def begin(**payload: Any) -> Next[Booking] | Refuse:
    return start(Start("t-1", "rooms-desk", "default", payload, AUTH, NOW))


def at(stage: str, booking: Booking) -> Context[Booking]:
    return Context(
        task_id="t-1",
        stage=stage,
        version=1,
        state=booking,
        requester="rooms-desk",
        tenant="default",
        approval=None,
        waits=(),
        refs={},
        auth=AUTH,
        now=NOW,
        op_key=lambda tool: "BOOK:t-1:v1",
    )


def test_boardroom_waits_eight_hours_for_an_approver_then_is_ready() -> None:
    decided = begin(room="boardroom", day="2030-06-03", people="12", workflow="room_booking")
    wait = Wait(events.APPROVE, (APPROVERS,), timedelta(hours=8), on_deadline="expire", then=READY)
    assert decided == Next(AWAITING_APPROVAL, Booking(room="boardroom", day=DAY, people=12), wait=wait)


def test_small_rooms_are_ready_at_once() -> None:
    assert begin(room="huddle", day="2030-06-03", people=4) == Next(
        READY, Booking(room="huddle", day=DAY, people=4)
    )


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"day": "2030-06-03", "people": 2}, "not a booking: room: Field required"),
        ({"room": "huddle", "day": "soon", "people": 2}, "not a booking: day: "),
        ({"room": "huddle", "day": "2030-06-03", "people": 0}, "not a booking: people: "),
        (
            {"room": "attic", "day": "2030-06-03", "people": 2},
            "no room 'attic'; rooms are huddle, garden, boardroom",
        ),
        ({"room": "huddle", "day": "2030-06-03", "people": 9}, "huddle seats 4, not 9"),
        ({"room": "garden", "day": "2030-05-31", "people": 2}, "2030-05-31 has passed"),
    ],
)
def test_a_booking_that_cannot_be_made_is_refused(payload: dict[str, Any], reason: str) -> None:
    decided = begin(**payload)
    assert isinstance(decided, Refuse) and decided.reason.startswith(reason)


def test_payload_fields_the_booking_does_not_hold_are_left_out_of_its_state() -> None:
    decided = begin(room="garden", day="2030-06-03", people=2, workflow="room_booking", floor=3)
    assert decided == Next(READY, Booking(room="garden", day=DAY, people=2))


def test_the_proposal_on_record_runs_and_any_other_goes_to_a_person() -> None:
    ctx = at(READY, Booking(room="garden", day=DAY, people=6))
    effect = ctx.effect("book_room", BookArgs(task_id="t-1", room="garden", day=DAY))
    assert check(ctx, effect) is effect and effect.op_key == "BOOK:t-1:v1"
    for args in (
        BookArgs(task_id="t-1", room="boardroom", day=DAY),
        BookArgs(task_id="t-1", room="garden", day=DAY + timedelta(days=1)),
        BookArgs(task_id="t-2", room="garden", day=DAY),
    ):
        assert isinstance(check(ctx, ctx.effect("book_room", args)), Review)


def test_a_booking_closes_the_task_with_its_reference() -> None:
    ctx = at(READY, Booking(room="garden", day=DAY, people=6))
    assert booked(ctx, "book_room", {"booking": "bk-1"}) == Next(CLOSED, refs={"booking": "bk-1"})


# ---- the tool -------------------------------------------------------------------------------


@pytest.fixture()
def calendar(tmp_path: Path) -> BookRoom:
    tool = BookRoom()
    tool.connect(Settings.from_env({"WAKEFUL_HOME": str(tmp_path)}))
    return tool


def test_the_calendar_books_once_per_op_key_and_finds_it_again(calendar: BookRoom) -> None:
    args = BookArgs(task_id="t-1", room="garden", day=DAY)
    assert calendar.lookup("BOOK:t-1:v1") is None
    first = calendar.call("BOOK:t-1:v1", args, 1)
    assert calendar.call("BOOK:t-1:v1", args, 2) == first  # called again after a crash
    assert calendar.lookup("BOOK:t-1:v1") == first
    assert len(calendar.path.read_text().splitlines()) == 1


def test_the_calendar_refuses_a_room_already_booked_that_day(calendar: BookRoom) -> None:
    calendar.call("BOOK:t-1:v1", BookArgs(task_id="t-1", room="garden", day=DAY), 1)
    with pytest.raises(ToolRefused, match="garden is already booked on 2030-06-03"):
        calendar.call("BOOK:t-2:v1", BookArgs(task_id="t-2", room="garden", day=DAY), 1)
    assert calendar.lookup("BOOK:t-2:v1") is None
    calendar.call("BOOK:t-3:v1", BookArgs(task_id="t-3", room="huddle", day=DAY), 1)  # another room
    assert len(calendar.path.read_text().splitlines()) == 2


# ---- the runtime's rules over this app (what the gate and the executor do, without I/O) ------


def created(room: str = "boardroom") -> Checkpoint:
    start_ = Start(
        "t-1", "rooms-desk", "default", {"room": room, "day": "2030-06-03", "people": 3}, AUTH, NOW
    )
    moved = engine.create(app, "room_booking", start_)
    assert isinstance(moved, engine.Moved)
    return moved.checkpoint


def approved_by(cp: Checkpoint, who: str, version: Any = 1, when: datetime = NOW) -> Any:
    heard = wakes.Heard(
        events.APPROVE, {"version": version}, who, cp.execution.pending_waits[0].correlation_id
    )
    return wakes.on_event(app, cp, heard, auth=AUTH, now=when)


def proposal(cp: Checkpoint) -> Effect | Refuse | Review:
    args = {"task_id": cp.task_id, "room": "boardroom", "day": "2030-06-03"}
    return effects.check_proposal(app, cp, "book_room", args, auth=AUTH, now=NOW)


def test_boardroom_cannot_be_booked_before_its_approval() -> None:
    cp = created()
    assert (cp.stage, cp.business.version, cp.execution.pending_waits[0].wait_for) == (
        AWAITING_APPROVAL,
        1,
        "approval",
    )
    ran = wakes.on_event(app, cp, wakes.Heard(events.RUN, {}, "rooms-desk"), auth=AUTH, now=NOW)
    assert ran == Refuse("needs an approval for version 1 before it can run")
    assert proposal(cp) == Refuse("this step needs an approval for version 1 first")


@pytest.mark.parametrize(
    ("who", "version", "reason"),
    [
        ("mallory", 1, "not an authorised approver"),
        ("alice", 2, "approval is for version 2, task is now version 1"),
        ("alice", True, "an approval names its task version as a whole number, got True"),
    ],
)
def test_only_a_live_approver_approves_the_current_version(who: str, version: Any, reason: str) -> None:
    assert approved_by(created(), who, version) == Refuse(reason)


def test_an_approval_after_the_deadline_is_refused_and_the_deadline_expires_the_booking() -> None:
    cp = created()
    late = NOW + timedelta(hours=8)
    refused = approved_by(cp, "alice", when=late)
    assert isinstance(refused, Refuse) and "deadline" in refused.reason
    expired = wakes.on_deadline(app, cp, late)
    assert expired is not None and expired.stage == CLOSED and expired.execution.pending_waits == ()
    assert engine.may_move(rooms, cp.stage, expired.stage)  # the store will write it


def test_approved_boardroom_runs_once_then_closes_and_uses_up_the_approval() -> None:
    moved = approved_by(created(), "alice")
    assert isinstance(moved, engine.Moved)
    cp = moved.checkpoint
    assert cp.stage == READY and cp.execution.pending_waits == () and cp.business.approval is not None
    effect = proposal(cp)
    assert isinstance(effect, Effect) and effect.op_key == "BOOK:t-1:v1"
    after = effects.done(app, cp, "book_room", {"booking": "bk-1"}, auth=AUTH, now=NOW)
    assert after.stage == CLOSED and after.external_refs == {"booking": "bk-1"}
    assert after.business.approval is not None and after.business.approval.consumed
    assert engine.terminal(rooms, after.stage)


def test_an_approver_who_loses_the_right_before_the_booking_runs_sends_it_to_a_person() -> None:
    moved = approved_by(created(), "alice")
    assert isinstance(moved, engine.Moved)
    without_alice = dataclasses.replace(AUTH, approvers=frozenset({"bob"}))
    args = {"task_id": "t-1", "room": "boardroom", "day": "2030-06-03"}
    ran = effects.check_proposal(app, moved.checkpoint, "book_room", args, auth=without_alice, now=NOW)
    assert ran == Review("approver alice is no longer authorised")


def test_a_booking_the_calendar_refuses_parks_the_task_for_a_person() -> None:
    assert effects.failed(
        app, created("garden"), "book_room", "garden is booked", auth=AUTH, now=NOW
    ) == Review("garden is booked")


# ---- the runtime's side of an app's own kinds and its expiring waits ----------------------------


def test_an_event_kind_of_the_apps_own_passes_the_door_for_a_signer_registered_for_it() -> None:
    signer = Ed25519Signer.from_seed("key-facilities", bytes(32))
    key = VerifyKey(signer.key_id, "ed25519", public_bytes(signer), "facilities")
    event = sign_event(signer, "room.cleaned", {}, task_id="t-1")
    known = app.kinds | {"room.cleaned"}
    verdict = inbound.judge(
        event, key, frozenset({"room.cleaned"}), datetime.now(UTC), timedelta(minutes=5), known=known
    )
    assert isinstance(verdict, inbound.Accepted), verdict
    unknown = inbound.judge(
        event, key, frozenset({"room.cleaned"}), datetime.now(UTC), timedelta(minutes=5), known=app.kinds
    )
    assert isinstance(unknown, inbound.Refused) and "unknown event kind" in unknown.reason


def test_an_expiring_wait_never_strands_its_task_even_where_the_table_cannot_close() -> None:
    strict_table = {
        tutorial.RECEIVED: (AWAITING_APPROVAL, READY),
        AWAITING_APPROVAL: (READY,),  # as the refund agent's table reads
        READY: (CLOSED,),
    }
    wf = dataclasses.replace(rooms, stages=strict_table)
    strict = App(name="strict-rooms", workflows=[wf], tools=list(app.tools))
    cp = created()
    expired = wakes.on_deadline(strict, cp, NOW + timedelta(hours=9))
    assert expired is not None and expired.stage == NEEDS_REVIEW and expired.execution.pending_waits == ()
    assert "expired" in (expired.business.last_refusal or "")
    assert engine.may_move(wf, cp.stage, expired.stage)  # the store will write it
