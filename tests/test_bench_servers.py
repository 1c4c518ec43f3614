"""`wakeful bench` counts the CPU of the engines this machine runs for it, and of no other, and
charges the tasks only what the roles spent between the first task and the last effect."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from wakeful.core.settings import Settings
from wakeful.devstack.bench_pipeline import by_role, server_cpu


def test_bench_counts_the_engines_run_here_and_no_server_run_elsewhere(
    settings: Settings, kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    if settings.kafka_bootstrap_external or settings.redis_url_external:
        pytest.skip("the servers are run elsewhere: there is no local process to count")
    before = server_cpu(settings)
    assert set(before) == {"kafka", "redis"} and all(seconds > 0 for seconds in before.values())
    since = server_cpu(settings, since=before)
    assert set(since) == {"kafka", "redis"} and all(seconds >= 0 for seconds in since.values())
    assert server_cpu(replace(settings, home=tmp_path)) == {}  # no pid files: nothing run here


def test_bench_charges_the_tasks_nothing_the_roles_spent_before_the_first() -> None:
    at_start = {"gate": 0.8, "gate#2": 0.9, "executor": 0.7}
    at_end = {"gate": 2.8, "gate#2": 1.9, "executor": 1.2, "executor#2": 0.5}  # #2 joined later
    assert by_role(("gate", "executor", "timer"), at_end, since=at_start) == pytest.approx(
        {"gate": 3.0, "executor": 1.0, "timer": 0.0}
    )
    assert by_role(("gate",), at_start) == pytest.approx({"gate": 1.7})
