"""The benches that start a fleet of their own, on a stack of their own (the fleet must be the only
one on its state dir): `wakeful bench --idle N`, what an idle fleet costs, every role process and
both servers named (D78); and `wakeful bench-fair`, a flood held to its limit (D108)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from helpers import private_stack, run_cli

from wakeful.consumers.kafka.supervisor import ROLES

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with private_stack(Path(tmp_path_factory.mktemp("idle"))) as env:
        yield env


def test_an_idle_bench_reports_each_role_process_and_both_servers_as_shares_of_a_core(
    private: dict[str, str],
) -> None:
    ran = run_cli(private, "bench", "--idle", "2", "--json", timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    report = orjson.loads(ran.stdout)
    assert report["processes"] == list(ROLES) and report["servers_counted"] == ["kafka", "redis"]
    share = report["cpu_pct_of_core"]
    assert all(share[role] >= 0 for role in ROLES) and share["kafka"] > 0
    assert 0 <= share["kafka_jit"] <= share["kafka"]
    assert share["roles"] == pytest.approx(sum(share[role] for role in ROLES), abs=0.05)
    assert share["total"] == pytest.approx(share["roles"] + share["kafka"] + share["redis"], abs=0.05)
    assert share["settled"] == pytest.approx(share["total"] - share["kafka_jit"], abs=0.05)
    assert report["idle_s"] >= 2 and report["redis_commands_per_s"] > 0
    assert "watching the idle fleet for 2 s" in ran.stderr


def test_an_idle_bench_shorter_than_a_second_is_refused_before_anything_starts(
    private: dict[str, str],
) -> None:
    ran = run_cli(private, "bench", "--idle", "0.5", timeout=60)
    assert ran.returncode == 2 and "--idle" in ran.stderr and "starting" not in ran.stderr


def test_a_fair_bench_holds_the_flood_to_its_limit_and_brings_every_task_of_both_tenants_through(
    private: dict[str, str],
) -> None:
    ran = run_cli(
        private, "bench-fair", "--flood", "300", "--steady", "5", "--limit", "10", "--json", timeout=400
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    report = orjson.loads(ran.stdout)
    assert (report["flood"]["completed"], report["steady"]["completed"]) == (300, 5)
    assert report["flood"]["most_in_flight"] <= 10 < report["flood"]["most_held"]
    assert report["limit"] == 10 and report["redis_bytes_per_held_create"] > 0
    assert report["steady"]["wake_to_effect_ms"]["p99"] > 0
