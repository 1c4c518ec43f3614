"""What `wakeful recover` folds from wakeful.log (state/rebuild.py) and what a change puts on it
(state/last_step.logged): the newest checkpoint stands, every inbox mark and the last write to each
op key are kept, a relay's republished suffix changes nothing, and a record that names a write
recovery does not replay, or another task, is named instead of applied."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st
from rebuild_records import T0, TASK, action, change, folded, tombstone

from wakeful.schemas.changelog import LogItem, quarantine_record
from wakeful.schemas.logs import ActionStatus
from wakeful.state import keys, last_step
from wakeful.state.rebuild import fence_after, fence_floor


def test_the_newest_checkpoint_stands_and_every_inbox_mark_is_kept() -> None:
    task = folded([change(1), change(3), change(2)]).tasks[TASK]
    assert task.last is not None and task.last.state_version == 3
    assert task.blob == b"blob-3"
    assert task.inbox == {"m-1", "m-2", "m-3"}
    assert task.unrestorable() is None


def test_the_last_write_to_an_op_key_stands() -> None:
    task = folded(
        [change(1), action(ActionStatus.IN_FLIGHT), action(ActionStatus.IN_FLIGHT, attempts=1)]
    ).tasks[TASK]
    assert task.ops["REFUND:t-1:v1"].attempts == 1
    task = folded([action(ActionStatus.IN_FLIGHT), action(ActionStatus.SUCCEEDED), change(2)]).tasks[TASK]
    assert task.ops["REFUND:t-1:v1"].status is ActionStatus.SUCCEEDED


@given(st.permutations(range(5)))
def test_the_action_log_folds_to_its_last_write_in_any_order(order: list[int]) -> None:
    history = [
        action(ActionStatus.IN_FLIGHT, fence=3),
        action(ActionStatus.IN_FLIGHT, fence=3, attempts=1),  # a call that found the tool away
        action(ActionStatus.FAILED, fence=4, attempts=1),
        action(ActionStatus.IN_FLIGHT, fence=6, attempts=1),  # re-armed under a newer lease
        action(ActionStatus.SUCCEEDED, fence=6, attempts=1),
    ]
    task = folded([change(1), *(history[i] for i in order)]).tasks[TASK]
    assert task.ops["REFUND:t-1:v1"] == history[-1].action


@given(st.integers(min_value=1, max_value=8), st.integers(min_value=0, max_value=8))
def test_a_republished_suffix_changes_nothing(versions: int, cut: int) -> None:
    items: list[LogItem] = []
    for v in range(1, versions + 1):
        items += [change(v), action(ActionStatus.IN_FLIGHT, fence=v), action(ActionStatus.SUCCEEDED, fence=v)]
    again = items + items[min(cut, len(items)) :]
    once, twice = folded(items), folded(again)
    assert twice.duplicates == len(again) - len(items)
    a, b = once.tasks[TASK], twice.tasks[TASK]
    assert (a.last, a.inbox, a.ops, a.writes) == (b.last, b.inbox, b.ops, b.writes)


def test_a_change_without_a_checkpoint_keeps_its_task_from_being_restored() -> None:
    for history in ([change(1), change(2, sealed=False)], [change(1, sealed=False), change(2)]):
        why = folded(history).tasks[TASK].unrestorable()
        assert why is not None and "before the log carried checkpoints" in why


def test_a_history_with_a_gap_is_not_restored() -> None:
    why = folded([change(1), change(3)]).tasks[TASK].unrestorable()
    assert why is not None and "misses version(s) [2]" in why


def test_a_record_that_claims_another_records_id_cannot_hide_it() -> None:
    forged = change(1).model_copy(update={"task_id": "t-2"})  # t-2's record named "t-1:1"
    fold = folded([forged, change(1), change(2)])
    assert fold.tasks[TASK].last is not None and fold.tasks[TASK].newest == 2
    assert fold.duplicates == 0 and fold.tasks["t-2"].problems
    flying = action(ActionStatus.IN_FLIGHT).model_copy(update={"record_id": f"{TASK}:1"})
    fold = folded([flying, change(1)])
    assert fold.tasks[TASK].versions == {1} and fold.tasks[TASK].ops == {}


def test_a_record_that_names_no_task_id_is_named_and_the_fold_goes_on() -> None:
    fold = folded([change(1).model_copy(update={"task_id": "bad id}"}), change(1)])
    assert len(fold.problems) == 1 and fold.tasks[TASK].unrestorable() is None


def test_a_task_with_only_action_records_is_named_not_restored() -> None:
    assert folded([action(ActionStatus.IN_FLIGHT)]).tasks[TASK].unrestorable() is not None


def test_receipts_are_kept_with_their_time_and_other_writes_are_named() -> None:
    receipt = keys.receipt("ev-12345678", TASK, key_id="key-a")
    writes = (
        ("SET", receipt, '{"status":"accepted"}'),
        ("HSET", keys.evidence(TASK), "note", '{"ref":"r"}'),  # excerpts stay off the log (forget)
        ("SET", keys.state(TASK), "forged"),  # the state comes from `sealed` only
        ("SET", keys.receipt("ev-12345678", "t-2", key_id="key-a"), "{}"),  # another task's key
        ("DEL", keys.ops(TASK)),
    )
    task = folded([change(1, writes=writes)]).tasks[TASK]
    assert task.writes == {receipt: ('{"status":"accepted"}', T0)}
    assert len(task.problems) == 4


def test_a_quarantine_stands_until_a_release_lifts_it() -> None:
    marker = b'{"reason":"incompatible","detail":"d","at":"x"}'
    held = folded([change(1), quarantine_record(TASK, marker)]).tasks[TASK]
    assert held.quarantine == marker.decode()
    lifted = folded(
        [change(1), quarantine_record(TASK, marker), change(2, writes=(("DEL", keys.quarantine(TASK)),))]
    )
    assert lifted.tasks[TASK].quarantine is None


def test_records_that_disagree_with_their_task_are_named() -> None:
    wrong_id = change(1).model_copy(update={"record_id": f"{TASK}:9"})
    task = folded([wrong_id, change(2)]).tasks[TASK]
    assert task.inbox == {"m-2"} and len(task.problems) == 1
    other = action(ActionStatus.IN_FLIGHT, task_id="t-2").model_copy(update={"task_id": TASK})
    task = folded([change(1), other]).tasks[TASK]
    assert task.ops == {} and len(task.problems) == 1


def test_a_restored_fence_outranks_every_lease_the_log_may_have_missed() -> None:
    task = folded([change(1), action(ActionStatus.IN_FLIGHT, fence=7)]).tasks[TASK]
    now = datetime(2026, 12, 6, tzinfo=UTC)
    # a million grants after the log's last record, none of them on the log, stay below it
    assert fence_after(3, task, now) == fence_floor(now) > 9 + 1_000_000
    assert fence_floor(datetime(2286, 1, 1, tzinfo=UTC)) < 10**14  # Lua writes it in the lease token
    ahead = fence_floor(now) + 5  # fences from a recovery whose clock ran ahead: the log's stands
    task = folded([change(1), action(ActionStatus.IN_FLIGHT, fence=ahead)]).tasks[TASK]
    assert fence_after(3, task, now) == ahead


def test_a_change_logs_only_the_writes_recovery_needs() -> None:
    receipt = keys.receipt("ev-12345678", TASK, key_id="key-a")
    also = [
        ("SET", receipt, b'{"status":"accepted"}', "EX", 60),
        ("HSET", keys.evidence(TASK), "note", b'{"ref":"r"}'),
        ("DEL", keys.quarantine(TASK)),
        ("DEL", keys.lease(TASK)),
        ("XADD", keys.task_memory(TASK), "*", "r", b"{}"),
        ("FCALL", "wakeful_v5_action_finish", 2, keys.ops(TASK), keys.outbox(TASK), "op", "{}", 1),
    ]
    assert last_step.logged(TASK, also) == (
        ("SET", receipt, '{"status":"accepted"}'),
        ("DEL", keys.quarantine(TASK)),
    )


def test_a_purged_task_is_never_restored() -> None:
    fold = folded([change(1), action(ActionStatus.SUCCEEDED), change(2), tombstone(2)])
    assert TASK not in fold.tasks and fold.purged == 1


def test_a_task_made_again_under_a_purged_id_is_a_life_of_its_own() -> None:
    fold = folded([change(1), change(2), tombstone(2), change(1)])
    assert fold.tasks[TASK].versions == {1} and fold.duplicates == 0
    assert fold.tasks[TASK].unrestorable() is None


def test_a_tombstone_that_is_not_its_own_id_takes_nothing() -> None:
    forged = tombstone(2).model_copy(update={"record_id": f"{TASK}:purge:9:0"})
    fold = folded([change(1), change(2), forged])
    assert fold.tasks[TASK].newest == 2 and fold.purged == 0 and len(fold.problems) == 1
