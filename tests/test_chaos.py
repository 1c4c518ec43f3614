"""`wakeful chaos`, small, for each bundled app: random workers SIGKILLed while the app's traffic
runs; no task lost, no effect twice at the downstream, every event applied once."""

from __future__ import annotations

import pytest
from helpers import CHAOS_S, chaos_report

from wakeful.core.settings import Settings

# app -> (tasks, kills): the onboarding's tasks take twice the hops, the support's four tool calls,
# so fewer of them
RUNS = {
    "wakeful.examples.refund:app": (80, 8),
    "wakeful.examples.onboarding:app": (50, 6),
    "wakeful.examples.support:app": (50, 6),
}
REPLICAS = 3  # processes per role in the second run of each app: kills hit one of several


@pytest.mark.timeout(CHAOS_S + 60)  # above the round's own bound
@pytest.mark.parametrize("replicas", [1, REPLICAS], ids=["one-process-per-role", "three-per-role"])
@pytest.mark.parametrize("app", RUNS, ids=["refund", "onboarding", "support"])
def test_random_kills_lose_no_task_and_duplicate_no_effect_at_the_downstream(
    app: str, replicas: int, settings: Settings, kafka_bootstrap: str, redis_url: str
) -> None:
    tasks, kills = RUNS[app]
    report = chaos_report(
        "--app", app, "--tasks", str(tasks), "--kills", str(kills), "--seed", "7", "--replicas", str(replicas)
    )
    assert report["ok"] and report["kills"] == kills and report["processes"] == 6 * replicas
    assert (report["lost"], report["duplicate_effects"], report["misapplied_events"]) == (0, 0, 0)
    # every task ended where its traffic said: its path's stage, with its path's effects
    assert report["off_plan"] == 0, report["off_plan_examples"]
    assert report["with_effects"] == tasks
    second = report["second_path"]
    if app.endswith("refund:app"):
        assert report["stages"] == {"closed": tasks} and report["effects"] == tasks
    elif app.endswith("support:app"):
        assert 0 < second < tasks, report  # the seed sends some tickets through an approval
        assert report["stages"] == {"closed": tasks}
        assert tasks < report["effects"] < 2 * tasks  # a notice each, a remedy where one is due
    else:
        assert 0 < second < tasks, report  # the seed sends some tasks through a compensation
        assert report["stages"] == {"closed": tasks - second, "needs_review": second}
        assert report["effects"] == 2 * tasks
