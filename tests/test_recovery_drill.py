"""Redis lost mid-workload and rebuilt from Kafka (D70), on a private stack (own state dir and
ports: the drill deletes every wakeful key of the stack it runs on), run as a user runs it:
`wakeful chaos --lose-redis wipe|fresh` in a subprocess.

300 tasks, some waiting for an approval, some with an intent in flight whose call was made: after
`wakeful recover` and a restart of the workers every task finishes, each effect is booked once at
the downstream, and the waiting tasks still wait with their deadlines until their approvals come."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from helpers import private_stack, run_cli

DRILL_S = 420  # one drill: two fleet starts, 300 tasks, two recoveries, on a small shared machine
pytestmark = pytest.mark.timeout(DRILL_S + 300)


def wakeful(env: dict[str, str], *args: str, timeout: float = DRILL_S) -> subprocess.CompletedProcess[str]:
    return run_cli(env, *args, timeout=timeout)


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with private_stack(tmp_path_factory.mktemp("drill")) as env:
        yield env


def drill(env: dict[str, str], mode: str, seed: int) -> dict[str, Any]:
    ran = wakeful(env, "chaos", "--lose-redis", mode, "--tasks", "300", "--seed", str(seed), "--json")
    assert ran.stdout.strip(), ran.stderr[-4000:]
    report: dict[str, Any] = orjson.loads(ran.stdout)
    assert ran.returncode == (0 if report["ok"] else 1)
    return report


def assert_recovered(report: dict[str, Any]) -> None:
    assert report["ok"], report
    assert report["in_flight_at_loss"], "the loss came with no intent in flight"
    assert (
        report["waiting_at_loss"] > 0 and report["deadlines_kept"] is True and report["timers_kept"] is True
    )
    # restored in flight, so the executor looks it up by its op key before anything is called again
    assert report["in_flight_after"] == report["in_flight_at_loss"]
    assert report["recovered"]["failed"] == {} and report["recovered"]["restored"] >= 300
    assert report["second_run_restored"] == 0  # safe to run twice
    assert (report["lost"], report["duplicate_effects"], report["misapplied_events"]) == (0, 0, 0)
    assert report["stages"] == {"closed": 300} and report["effects"] == 300 and report["off_plan"] == 0


def test_every_wakeful_key_deleted_mid_workload_is_rebuilt_and_no_effect_runs_twice(
    private: dict[str, str],
) -> None:
    report = drill(private, "wipe", 5)
    assert report["refused_while_running"] is True
    assert_recovered(report)


def test_a_fresh_empty_redis_on_another_port_is_rebuilt_and_no_effect_runs_twice(
    private: dict[str, str],
) -> None:
    assert_recovered(drill(private, "fresh", 6))


def test_recover_check_says_the_log_covers_what_redis_holds(private: dict[str, str]) -> None:
    checked = wakeful(private, "recover", "--check", "--json", timeout=120)
    assert checked.returncode == 0, checked.stderr[-2000:]
    assert orjson.loads(checked.stdout)["uncovered"] == {}
