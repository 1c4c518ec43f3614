"""A tombstone on wakeful.log takes its task at recovery only if `wakeful task purge` could have
made it (workflow/tombstones.py, state/rebuild_ends.py, D92): the log must show the task finished by
its app's rules at the version the tombstone names, waiting for nothing, with no quarantine marker,
and older than the retention at the purge's time. Any other tombstone is refused and named, and
both of recover's reads keep the task."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from rebuild_records import TASK, change

from wakeful.examples.refund import app as refund_app
from wakeful.schemas.changelog import ChangeMark, LogItem, quarantine_record
from wakeful.schemas.logs import OutboxRecord, WaitSummary
from wakeful.schemas.tombstone import PurgeRecord, purge_record
from wakeful.state import keys
from wakeful.state.rebuild import Fold
from wakeful.state.rebuild_ends import Ends, Tip, fold_message, marks, position, purged_for_good
from wakeful.workflow.tombstones import PurgeRule, purge_rule

pytestmark = pytest.mark.timeout(60)

NOW = datetime(2031, 3, 1, tzinfo=UTC)
FLOOR = timedelta(hours=2)
RULE = purge_rule(refund_app, FLOOR, NOW)  # the refund keeps finished tasks 30 days
LONG_AGO = NOW - timedelta(days=60)


def tomb(
    version: int = 3, *, stage: str = "closed", at: datetime = NOW, workflow: str = "refund"
) -> PurgeRecord:
    return purge_record(
        task_id=TASK,
        tenant="acme",
        workflow=workflow,
        stage=stage,
        state_version=version,
        last_change=LONG_AGO,
        purged_at=at,
        by="admin",
        reason="closed_tasks=30 days",
    )


def mark(stage: str = "closed", *, version: int = 3, at: datetime = LONG_AGO, waits: int = 0) -> ChangeMark:
    return ChangeMark(version, at.isoformat(), "acme", "refund", stage, waits, ())


OPEN = Tip(mark("awaiting_approval", waits=1))
LATER = NOW + timedelta(days=400)
CASES = [
    ("a closed task past its retention", tomb(), Tip(mark()), None),
    ("an open task waiting for an approval", tomb(stage="awaiting_approval"), OPEN, "the task is open"),
    ("a tombstone that lies about the stage", tomb(), OPEN, "last change says refund/awaiting_approval"),
    ("a task parked for review", tomb(stage="needs_review"), Tip(mark("needs_review")), "the task is open"),
    ("a task quarantined by marker", tomb(), Tip(mark(), '{"reason":"bad_seal"}'), "quarantine marker"),
    ("a closed task that still waits", tomb(), Tip(mark(waits=1)), "waits for 1"),
    ("closed inside the retention", tomb(), Tip(mark(at=NOW - timedelta(days=29))), "within the app's"),
    ("a version the log does not end at", tomb(2), Tip(mark()), "newest change on the log is version 3"),
    ("a task whose changes the log lacks", tomb(), Tip(), "holds no change of the task"),
    ("dated after the recovery", tomb(at=LATER), Tip(mark(at=LATER - timedelta(days=90))), "after this"),
    ("a workflow the app does not run", tomb(workflow="x"), Tip(mark()._replace(workflow="x")), "not one"),
    ("another tenant's", tomb().model_copy(update={"tenant": "evil"}), Tip(mark()), "of tenant 'evil'"),
]


@pytest.mark.parametrize(("case", "tomb_", "tip", "why"), CASES, ids=[c[0] for c in CASES])
def test_a_tombstone_is_taken_only_when_the_purge_could_have_made_it(
    case: str, tomb_: PurgeRecord, tip: Tip, why: str | None
) -> None:
    said = RULE(tomb_, tip)
    assert (said is None) == (why is None), (case, said)
    assert why is None or (said is not None and why in said), said


def test_the_rule_holds_a_task_to_the_doors_replay_window_when_the_app_keeps_less() -> None:
    short = PurgeRule(RULE.finished, max(timedelta(hours=1), FLOOR), NOW)
    assert short(tomb(), Tip(mark(at=NOW - timedelta(minutes=90)))) is not None
    assert short(tomb(), Tip(mark(at=NOW - timedelta(hours=3)))) is None


def life(stage: str, waits: int = 0) -> list[OutboxRecord]:
    """Three changes of TASK in the refund, the last at `stage`, long ago."""
    pending = tuple(
        WaitSummary(wait_for="approval", deadline=NOW, correlation_id="c-1") for _ in range(waits)
    )
    made = [
        change(v).model_copy(update={"tenant": "acme", "workflow": "refund", "at": LONG_AGO})
        for v in (1, 2, 3)
    ]
    made[-1] = made[-1].model_copy(update={"stage": stage, "waits": pending})
    return made


def both_reads(log: list[list[LogItem]]) -> tuple[Ends, dict[str, object], list[str]]:
    """recover's two reads over messages of one partition: the first read, the tasks the second
    hands over (each one's newest version), and the tasks purged for good among those named."""
    ends = Ends(RULE)
    for offset, items in enumerate(log):
        ends.add(position(0, offset), marks(items))
    fold, handed, gone = Fold(), dict[str, object](), list[str]()
    for offset, items in enumerate(log):
        gone += purged_for_good(ends, items, {TASK})
        handed |= {t.task_id: t.newest for t in fold_message(fold, ends, position(0, offset), items)}
    return ends, handed, gone


def test_a_tombstone_planted_behind_an_open_task_takes_nothing_and_is_named() -> None:
    planted = tomb(stage="awaiting_approval")
    ends, handed, gone = both_reads([[*life("awaiting_approval", waits=1)], [planted]])
    assert handed == {TASK: 3} and gone == []  # the task is restored, its wakes sent again
    assert list(ends.refused) == [planted.record_id] and "the task is open" in ends.refused[planted.record_id]


def test_a_purge_made_tombstone_takes_its_finished_task_in_both_reads() -> None:
    ends, handed, gone = both_reads([[*life("closed")], [tomb()]])
    assert handed == {} and gone == [TASK] and ends.refused == {}


def test_a_quarantine_on_the_log_holds_its_task_until_a_release_lifts_it() -> None:
    marker = b'{"reason":"incompatible","detail":"d","at":"x"}'
    held = quarantine_record(TASK, marker)
    closed = life("closed")
    release = closed[-1].model_copy(
        update={"state_version": 4, "record_id": f"{TASK}:4", "writes": (("DEL", keys.quarantine(TASK)),)}
    )
    kept, _, _ = both_reads([[*closed, held], [tomb()]])
    assert tomb().record_id in kept.refused
    taken, handed, _ = both_reads([[*closed, held, release], [tomb(4)]])
    assert taken.refused == {} and handed == {}
