"""What `wakeful recover` holds while it folds wakeful.log (state/rebuild.py, state/rebuild_ends.py,
D86): nothing per record and nothing per purged task; a repeat is told by what a record says, not
by remembering ids; a task is handed over once the message with its last record is folded, with
exactly what a fold of the whole log gives, and one purged for good is never held."""

from __future__ import annotations

from collections.abc import Sized
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rebuild_records import T0, TASK, action, change, folded, tombstone

from wakeful.schemas.changelog import ChangeMark, LogItem, log_items, log_marks, quarantine_record
from wakeful.schemas.logs import LOG_BATCH_HEAD, LOG_BATCH_TAIL, ActionStatus
from wakeful.schemas.tombstone import PurgeRecord
from wakeful.state import keys
from wakeful.state.rebuild import TOMBSTONES_KEPT, Fold, Folded
from wakeful.state.rebuild_ends import Ends, Tip, fold_message, marks, position, purged_for_good


def ANY_TOMBSTONE(_tomb: PurgeRecord, _tip: Tip) -> None:  # noqa: N802  # a rule, named as a constant
    """Every tombstone taken: what these tests check is the reads' agreement, not the purge's rule
    (tests/unit/test_tombstone_rule.py)."""


@pytest.mark.parametrize(
    ("versions", "newest", "gaps", "repeats"),
    [
        ([1, 2, 3], 3, [], 0),
        ([1, 3], 3, [(2, 2)], 0),
        ([1, 3, 2], 3, [], 0),  # a gap filled later (a partition added): nothing is missing
        ([1, 2, 3, 2, 3], 3, [], 2),  # a relay's republished suffix
        ([1, 5, 3], 5, [(2, 2), (4, 4)], 0),
        ([1, 5, 3, 3, 5, 1], 5, [(2, 2), (4, 4)], 3),
        ([2, 1], 2, [], 0),
    ],
)
def test_a_change_is_a_repeat_exactly_when_its_version_was_folded(
    versions: list[int], newest: int, gaps: list[tuple[int, int]], repeats: int
) -> None:
    fold = folded([change(v) for v in versions])
    task = fold.tasks[TASK]
    assert (task.newest, task.gaps, fold.duplicates) == (newest, gaps, repeats)
    assert task.inbox == {f"m-{v}" for v in versions}


def _sizes(obj: object) -> dict[str, int]:
    return {
        name: len(value)
        for name, value in vars(obj).items()
        if isinstance(value, Sized) and not isinstance(value, str | bytes)
    }


def test_a_fold_keeps_no_id_per_change_or_action_record() -> None:
    history: list[LogItem] = []
    for v in range(1, 301):
        history += [change(v), action(ActionStatus.IN_FLIGHT, fence=v)]
        history.append(action(ActionStatus.SUCCEEDED, fence=v))
    fold = folded(history + history[600:])  # and a republished suffix of 300 records
    task = fold.tasks[TASK]
    assert fold.duplicates == 300 and task.newest == 300 and task.unrestorable() is None
    # the inbox marks are the task's state (Redis keeps them all); nothing else counts the records
    held = {**_sizes(fold), **{f"task.{k}": v for k, v in _sizes(task).items() if k != "inbox"}}
    assert max(held.values()) <= 1, held


def test_a_fold_keeps_nothing_per_purged_task_beyond_its_last_tombstones() -> None:
    fold = Fold()
    for n in range(TOMBSTONES_KEPT + 500):
        task_id = f"t-{n}"
        fold.add([change(1).model_copy(update={"task_id": task_id, "record_id": f"{task_id}:1"})])
        stamp = f"{task_id}:purge:1:{int(T0.timestamp() * 1000)}"
        fold.add([tombstone(1).model_copy(update={"task_id": task_id, "record_id": stamp})])
    assert fold.purged == TOMBSTONES_KEPT + 500 and not fold.tasks
    assert max(_sizes(fold).values()) <= TOMBSTONES_KEPT


def test_a_quarantine_record_repeated_after_its_release_parks_nothing() -> None:
    marker = b'{"reason":"incompatible","detail":"d","at":"x"}'
    held = quarantine_record(TASK, marker)
    release = change(2, writes=(("DEL", keys.quarantine(TASK)),))
    fold = folded([change(1), held, release, held, release])
    assert fold.tasks[TASK].quarantine is None and fold.duplicates == 2


def test_a_repeated_tombstone_takes_nothing_from_the_task_made_again() -> None:
    fold = folded([change(1), change(2), tombstone(2), change(1), tombstone(2)])
    assert fold.tasks[TASK].newest == 1 and fold.purged == 1 and fold.duplicates == 1


def test_ends_name_each_living_tasks_last_message_and_forget_a_purged_one() -> None:
    ends = Ends(ANY_TOMBSTONE)
    ends.add(position(0, 1), marks([change(1), change(2)]))
    ends.add(position(0, 4), marks([tombstone(2)]))
    assert TASK not in ends
    ends.add(position(0, 7), marks([change(1)]))  # made again under the purged id
    ends.add(position(0, 9), marks([tombstone(2).model_copy(update={"record_id": f"{TASK}:purge:9:0"})]))
    ends.add(position(1, 0), marks([change(1).model_copy(update={"task_id": "bad id}"})]))
    assert ends.at == {TASK: position(0, 7)}
    assert position(1, 0) > position(0, 2**40)  # partition by partition, as the second read goes


@dataclass(frozen=True)
class Message:
    partition: int
    offset: int
    items: list[LogItem]


def _run(task: str, lives: int, versions: int, purged_last: bool) -> list[LogItem]:
    """A task's records as its relay publishes them: changes with an intent and outcome each, a
    tombstone after each life but perhaps the last."""
    out: list[LogItem] = []
    for life in range(lives):
        for v in range(1, versions + 1):
            c = change(v).model_copy(update={"task_id": task, "record_id": f"{task}:{v}"})
            out += [c, action(ActionStatus.IN_FLIGHT, fence=v + 10 * life, task_id=task)]
            out.append(action(ActionStatus.SUCCEEDED, fence=v + 10 * life, task_id=task))
        if life < lives - 1 or purged_last:
            stamp = f"{task}:purge:{versions}:{int(T0.timestamp() * 1000) + life}"
            out.append(tombstone(versions).model_copy(update={"task_id": task, "record_id": stamp}))
            out[-1] = out[-1].model_copy(update={"purged_at": T0.replace(microsecond=life * 1000)})
    return out


@st.composite
def logs(draw: st.DrawFn) -> list[Message]:
    """A log of a few tasks over two partitions: each task's records in order on its partition,
    interleaved with the others', cut into messages, with republished suffixes."""
    streams: dict[int, list[list[LogItem]]] = {0: [], 1: []}
    for n in range(draw(st.integers(1, 5))):
        records = _run(f"t-{n}", draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.booleans()))
        # a relay that crashed before its trim: never a record from before a tombstone (a purge
        # takes a task once its outbox is drained), perhaps the tombstone and what follows
        tombs = [i for i, r in enumerate(records) if isinstance(r, PurgeRecord)]
        cut = draw(st.integers(tombs[-1] if tombs else 0, len(records)))
        if draw(st.booleans()):
            records += records[cut:]
        streams[draw(st.integers(0, 1))].append(records)
    messages: list[Message] = []
    for partition, runs in streams.items():
        queue: list[LogItem] = []
        while any(runs):
            run = draw(st.sampled_from([r for r in runs if r]))
            queue.append(run.pop(0))
        offset = 0
        while queue:
            size = draw(st.integers(1, 4))
            messages.append(Message(partition, offset, queue[:size]))
            queue, offset = queue[size:], offset + 1
    return messages


def _seen(task: Folded) -> tuple[object, ...]:
    return (task.last, task.blob, task.inbox, task.ops, task.writes, task.quarantine, task.unrestorable())


@settings(max_examples=150, deadline=None)
@given(logs())
def test_tasks_handed_over_as_their_records_end_are_what_the_whole_logs_fold_gives(
    log: list[Message],
) -> None:
    whole = Fold()
    for m in log:
        whole.add(m.items)
    ends = Ends(ANY_TOMBSTONE)
    for m in log:
        ends.add(position(m.partition, m.offset), marks(m.items))
    fold, handed, most = Fold(), dict[str, Folded](), 0
    for m in log:
        for task in fold_message(fold, ends, position(m.partition, m.offset), m.items):
            assert task.task_id not in handed  # handed over once: its records were all folded
            handed[task.task_id] = task
        most = max(most, len(fold.tasks))
    assert not fold.tasks  # nothing left behind at the log's end
    assert {t: _seen(f) for t, f in handed.items()} == {t: _seen(f) for t, f in whole.tasks.items()}
    assert most <= len(ends)  # never a task purged for good


def _message(items: list[LogItem]) -> bytes:
    return LOG_BATCH_HEAD + b",".join(i.encode() for i in items) + LOG_BATCH_TAIL


def test_the_first_read_takes_each_records_task_a_changes_mark_and_decodes_only_tombstones() -> None:
    value = _message([change(1), action(ActionStatus.IN_FLIGHT, task_id="t-2"), tombstone(1)])
    found, problems, _ = log_marks(value)
    assert [t for t, _ in found] == [TASK, "t-2", TASK] and not problems
    assert [type(m).__name__ for _, m in found] == ["ChangeMark", "NoneType", "PurgeRecord"]
    assert found[0][1] == ChangeMark(1, "2026-01-01T00:00:00Z", "", "", "ready", 0, ())
    no_id = LOG_BATCH_HEAD + b'{"state_version":1}' + LOG_BATCH_TAIL
    assert log_marks(no_id)[1] == ["record 0: it names no task id"]


@pytest.mark.parametrize(
    ("wanted", "read", "passed"),
    [
        (None, ["OutboxRecord", "ActionRecord", "PurgeRecord"], 0),
        ({TASK}, ["OutboxRecord", "PurgeRecord"], 1),
        (set(), ["PurgeRecord"], 2),  # a tombstone is always read: the fold counts it
    ],
)
def test_the_second_read_decodes_only_the_records_of_tasks_living_on_the_log(
    wanted: set[str] | None, read: list[str], passed: int
) -> None:
    value = _message([change(1), action(ActionStatus.IN_FLIGHT, task_id="t-2"), tombstone(1)])
    items, problems, skipped = log_items(value, None if wanted is None else wanted.__contains__)
    assert ([type(i).__name__ for i in items], skipped, problems) == (read, passed, [])


def test_a_record_that_names_no_task_is_still_named_on_the_second_read() -> None:
    ends = Ends(ANY_TOMBSTONE)
    bad = change(1).model_copy(update={"task_id": "bad id}"})
    ends.add(position(0, 0), marks([bad, change(1)]))
    fold = Fold()
    assert [t.task_id for t in fold_message(fold, ends, position(0, 0), [bad, change(1)])] == [TASK]
    assert len(fold.problems) == 1 and ends.wanted("bad id}") and ends.wanted(" ")
    no_id = LOG_BATCH_HEAD + b'{"state_version":1}' + LOG_BATCH_TAIL
    items, problems, passed = log_items(no_id, ends.wanted)
    assert (items, len(problems), passed) == ([], 1, 0)


FORGED = tombstone(1).model_copy(update={"record_id": "t-1:purge:not-its-own"})


@pytest.mark.parametrize(
    ("history", "among", "purged"),
    [
        ([change(1), tombstone(1)], {TASK}, {TASK}),
        ([change(1), tombstone(1), change(2)], {TASK}, set()),  # made again under its id (D73)
        ([change(1), tombstone(1)], set(), set()),  # no re-driven wake names it: nothing kept of it
        ([change(1), FORGED], {TASK}, set()),  # a tombstone the fold does not take
    ],
    ids=["purged", "made-again", "not-re-driven", "not-its-own-tombstone"],
)
def test_a_re_driven_wake_is_left_out_only_when_its_tasks_history_ends_in_its_tombstone(
    history: list[LogItem], among: set[str], purged: set[str]
) -> None:
    ends = Ends(ANY_TOMBSTONE)
    for offset, item in enumerate(history):
        ends.add(position(0, offset), marks([item]))
    assert set(purged_for_good(ends, history, among)) == purged
