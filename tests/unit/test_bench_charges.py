"""`wakeful bench` charges the tasks only what the roles spent between the first task and the last
effect, a role's processes summed, one that joined later included."""

from __future__ import annotations

import pytest

from wakeful.bench.box import box, render_box, shares
from wakeful.bench.pipeline import by_role


def test_bench_charges_the_tasks_nothing_the_roles_spent_before_the_first() -> None:
    at_start = {"gate": 0.8, "gate#2": 0.9, "executor": 0.7}
    at_end = {"gate": 2.8, "gate#2": 1.9, "executor": 1.2, "executor#2": 0.5}  # #2 joined later
    assert by_role(("gate", "executor", "timer"), at_end, since=at_start) == pytest.approx(
        {"gate": 3.0, "executor": 1.0, "timer": 0.0}
    )
    assert by_role(("gate",), at_start) == pytest.approx({"gate": 1.7})


def test_the_box_headline_adds_the_servers_run_here_to_the_roles() -> None:
    figures = box(2.0, {"kafka": 1.234, "redis": 0.5})
    assert figures == {
        "roles": 2.0,
        "kafka": 1.23,
        "redis": 0.5,
        "kafka_jit": 0.0,
        "total": 3.73,
        "settled": 3.73,
        "servers_counted": ["kafka", "redis"],
    }
    assert render_box(figures) == "box CPU per task: 3.73 ms (roles 2.0, kafka 1.23, redis 0.5)"


def test_the_brokers_jit_compiling_is_counted_in_the_box_and_named_apart() -> None:
    figures = box(2.0, {"kafka": 3.0, "kafka_jit": 1.0, "redis": 0.5})
    assert (figures["total"], figures["settled"], figures["kafka_jit"]) == (5.5, 4.5, 1.0)
    assert render_box(figures).endswith("; 4.5 ms without the broker's 1.0 ms of JIT compiling)")


def test_a_server_run_elsewhere_is_named_as_not_counted_in_the_box_headline() -> None:
    figures = box(2.0, {"redis": 0.5})
    assert figures["total"] == 2.5 and figures["servers_counted"] == ["redis"]
    assert "kafka not on this machine, not counted" in render_box(figures)


def test_an_idle_share_is_percent_of_one_core() -> None:
    assert shares({"gate": 0.3, "kafka": 1.2}, 60.0) == {"gate": 0.5, "kafka": 2.0}


def test_the_jit_share_is_never_below_nothing_nor_above_the_brokers_whole() -> None:
    assert box(1.0, {"kafka": 2.0, "kafka_jit": -0.5})["kafka_jit"] == 0.0
    assert box(1.0, {"kafka": 2.0, "kafka_jit": 3.0})["settled"] == 1.0
