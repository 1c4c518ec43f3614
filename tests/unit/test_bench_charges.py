"""`wakeful bench` charges the tasks only what the roles spent between the first task and the last
effect, a role's processes summed, one that joined later included."""

from __future__ import annotations

import pytest

from wakeful.devstack.bench_pipeline import by_role


def test_bench_charges_the_tasks_nothing_the_roles_spent_before_the_first() -> None:
    at_start = {"gate": 0.8, "gate#2": 0.9, "executor": 0.7}
    at_end = {"gate": 2.8, "gate#2": 1.9, "executor": 1.2, "executor#2": 0.5}  # #2 joined later
    assert by_role(("gate", "executor", "timer"), at_end, since=at_start) == pytest.approx(
        {"gate": 3.0, "executor": 1.0, "timer": 0.0}
    )
    assert by_role(("gate",), at_start) == pytest.approx({"gate": 1.7})
