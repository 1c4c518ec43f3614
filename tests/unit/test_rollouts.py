"""A bounded rollout (D122), as pure rules: which version a new task starts on, and which version
gate 4 moves a sleeping task toward, for tenants the rollout names and the rest, through promote
and rollback; damage never widens it."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import contract_app
import contract_v2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakeful.authority.snapshot import Snapshot
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk import Start
from wakeful.workflow import compat, engine, rollouts
from wakeful.workflow.rollouts import ROLLED_BACK, Rollout

pytestmark = pytest.mark.unit

APP = contract_v2.rolling  # v2 current, migrating from v1; v1 kept
NOW = datetime(2026, 12, 7, tzinfo=UTC)
TO_ACME = Rollout(version=2, stable=1, tenants=("acme",))


def auth(rollout: Rollout | bytes | None) -> Snapshot:
    raw = rollout.encode() if isinstance(rollout, Rollout) else rollout
    stored = {} if raw is None else {"contract": raw}
    return Snapshot(approvers=frozenset(), limit=0, policy="p-1", rollouts=stored)


def created(rollout: Rollout | bytes | None, tenant: str, task_id: str = "t-1") -> int:
    start = Start(task_id, "svc", tenant, {"title": "lease"}, auth(rollout), NOW)
    moved = engine.create(APP, "contract", start)
    assert isinstance(moved, engine.Moved), moved
    return moved.checkpoint.business.workflow_version


def woken(rollout: Rollout | bytes | None, tenant: str, version: int) -> int:
    data = {"title": "lease"} | ({"parties": 2} if version == 2 else {})
    cp = contract_app.sleeping(APP.catalog, data, version)
    cp = cp.model_copy(update={"security": cp.security.model_copy(update={"tenant": tenant})})
    moved = compat.workflow_version(APP, cp, auth(rollout))
    assert isinstance(moved, Checkpoint), moved
    return moved.business.workflow_version


@pytest.mark.parametrize(
    ("rollout", "tenant", "starts_on", "v1_moves_to", "v2_stays_on"),
    [
        (None, "acme", 2, 2, 2),  # no rollout: everyone on the current version
        (TO_ACME, "acme", 2, 2, 2),  # the tenant it names: the new version, sleepers migrated
        (TO_ACME, "globex", 1, 1, 2),  # any other: the one before; nobody is moved back
        (dataclasses.replace(TO_ACME, tenants=("acme", "globex")), "globex", 2, 2, 2),  # promoted
        (dataclasses.replace(TO_ACME, state=ROLLED_BACK), "acme", 1, 1, 2),  # rolled back: pinned
        (Rollout(version=3, stable=2, tenants=("x",)), "globex", 2, 2, 2),  # an old deploy's record
        (b"not a record", "acme", 1, 1, 2),  # damage holds the new version back
    ],
)
def test_a_rollout_starts_new_tasks_and_moves_sleeping_ones_by_tenant_and_never_back(
    rollout: Rollout | bytes | None, tenant: str, starts_on: int, v1_moves_to: int, v2_stays_on: int
) -> None:
    assert created(rollout, tenant) == starts_on
    assert woken(rollout, tenant, 1) == v1_moves_to
    assert woken(rollout, tenant, 2) == v2_stays_on


@given(st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=50), st.floats(0, 1))
def test_a_share_takes_the_same_task_ids_on_every_process_and_never_more_as_it_shrinks(
    ids: list[str], share: float
) -> None:
    half = Rollout(version=2, stable=1, share=share)
    chosen = {t: rollouts.chosen(half, 2, "globex", t) for t in ids}
    assert chosen == {t: rollouts.chosen(half, 2, "globex", t) for t in ids}  # stable
    smaller = dataclasses.replace(half, share=share / 2)
    assert all(chosen[t] == 2 for t in ids if rollouts.chosen(smaller, 2, "globex", t) == 2)
    assert all(rollouts.target(half, 2, "globex") == 1 for _ in ids)  # a share moves no sleeper


def test_a_share_is_about_its_size() -> None:
    tasks = [f"t-{i}" for i in range(4000)]
    taken = sum(rollouts.chosen(Rollout(2, 1, share=0.25), 2, "globex", t) == 2 for t in tasks)
    assert 800 < taken < 1200
