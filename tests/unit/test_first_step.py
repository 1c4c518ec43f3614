"""A change's first step, as commands (state/first_step.py): it names the task's own keys only, all
in the task's hash slot, and its replies read back in the order they were asked for."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from wakeful.state import first_step, keys
from wakeful.state.pinned import command_keys, slot

TASK_IDS = st.from_regex(r"[a-z][a-z0-9-]{0,40}", fullmatch=True)


@given(TASK_IDS)
def test_the_first_step_names_only_the_tasks_own_keys_in_its_one_slot(task_id: str) -> None:
    commands = first_step.reads(task_id, "m-1")
    assert len(commands) == first_step.READS
    named = [k for c in commands for k in command_keys(c)]
    own = {keys.state(task_id), keys.ctr(task_id), keys.lease(task_id), keys.quarantine(task_id)}
    assert set(named) == own | {keys.inbox(task_id)}
    assert len({slot(k) for k in named}) == 1  # one slot: the same commands run on Redis Cluster


def test_every_key_a_change_guards_is_watched_before_it_is_read() -> None:
    watch, *reads = first_step.watch("t-1")
    assert watch[0] == "WATCH" and set(watch[1:]) == {k for c in reads for k in command_keys(c)}


def test_the_replies_read_back_in_the_order_they_were_asked_for() -> None:
    replies = [b"OK", [b"blob", b"owner:3", None], [(b"2-1", [b"v", b"2"])], 1]
    assert first_step.watched(replies) == (b"blob", [(b"2-1", [b"v", b"2"])], b"owner:3", None)
    assert first_step.applied(replies) and not first_step.applied([*replies[:3], 0])
