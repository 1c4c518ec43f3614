"""Which fence a change writes, and which writer is refused (state/checks.writer_fence, D49): pure,
from the lease holder its WATCHed read found and the fence of the task's last writer."""

from __future__ import annotations

import pytest
from helpers import new_checkpoint
from hypothesis import given
from hypothesis import strategies as st

from wakeful.core.errors import LeaseBusy, LeaseLost
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.state.checks import writer_fence
from wakeful.state.lease import Lease


def last_written_with(fence: int) -> Checkpoint:
    cp = new_checkpoint()
    return cp.model_copy(update={"execution": cp.execution.model_copy(update={"fence": fence})})


def lease(fence: int, owner: str = "w-1") -> Lease:
    return Lease("t-1", owner, fence, 15_000)


@pytest.mark.parametrize(
    ("mine", "held", "last", "outcome"),
    [
        # A holder whose lease the read found, at or past the last writer's fence, writes its own.
        (lease(5), b"w-1:5", 5, 5),
        (lease(6), b"w-1:6", 5, 6),
        # A lease that lapsed, or passed to another holder, or a fence older than the last write.
        (lease(5), None, 5, LeaseLost),
        (lease(5), b"w-2:6", 5, LeaseLost),
        (lease(4), b"w-1:4", 5, LeaseLost),
        # A lease-free change (the gate's) keeps the last writer's fence, while no one holds one.
        (None, None, 7, 7),
        (None, b"w-1:8", 7, LeaseBusy),
    ],
)
def test_the_fence_a_change_writes_and_the_writers_it_refuses(
    mine: Lease | None, held: bytes | None, last: int, outcome: int | type[Exception]
) -> None:
    current = last_written_with(last)
    if isinstance(outcome, int):
        assert writer_fence("t-1", mine, held, current) == outcome
    else:
        with pytest.raises(outcome):
            writer_fence("t-1", mine, held, current)


@given(last=st.integers(0, 2**40), mine=st.one_of(st.none(), st.integers(0, 2**40)), busy=st.booleans())
def test_no_change_writes_a_fence_below_the_last_writers(last: int, mine: int | None, busy: bool) -> None:
    """Fences only grow: whatever is held, a write that is allowed never moves the fence back."""
    own = lease(mine) if mine is not None else None
    held = (own.token if own else "w-9:1").encode() if busy or own else None
    try:
        written = writer_fence("t-1", own, held, last_written_with(last))
    except (LeaseLost, LeaseBusy):
        return
    assert written >= last
