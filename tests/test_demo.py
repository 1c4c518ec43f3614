"""The README's first command runs the main job: `wakeful demo` exits 0 with every step ok."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from wakeful.core.settings import Settings

DEMO_S = 300  # the whole story, with a fleet of its own, on a small shared machine
# The README's command runs as a user runs it. The other stories run with a short lease, as the
# crash tests do: the executor they kill held one, and the default 15 s was most of their run.
LEASE_TTL_MS = "1500"


def story(app: str) -> subprocess.CompletedProcess[str]:
    """`wakeful demo --app APP` as a user runs it, with the stories' short lease; it passed."""
    result = subprocess.run(
        [sys.executable, "-m", "wakeful.cli.main", "demo", "--app", app],
        capture_output=True,
        text=True,
        timeout=DEMO_S,
        check=False,
        env={**os.environ, "WAKEFUL_LEASE_TTL_MS": LEASE_TTL_MS},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "demo ok" in result.stdout and "FAIL" not in result.stderr
    return result


@pytest.mark.timeout(DEMO_S + 60)
def test_readme_first_command_wakeful_demo_exits_0(
    settings: Settings, kafka_bootstrap: str, redis_url: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "wakeful.cli.main", "demo"],
        capture_output=True,
        text=True,
        timeout=DEMO_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "demo ok" in result.stdout
    assert result.stderr.count("  ok   ") == 9 and "FAIL" not in result.stderr


@pytest.mark.timeout(DEMO_S + 60)
def test_the_onboarding_apps_story_exits_0_with_every_step_ok(
    settings: Settings, kafka_bootstrap: str, redis_url: str
) -> None:
    result = story("wakeful.examples.onboarding:app")
    assert result.stderr.count("  ok   ") == 18 and "FAIL" not in result.stderr
    assert "planted account blocked, never paid" in result.stderr
    for step in (
        "the letter's account kept only quarantined, read from the document",
        "a later task is shown the verified account, with its source",
        "the verifier's records quarantined: no later window shows them",
    ):
        assert f"  ok   {step}" in result.stderr, step


@pytest.mark.timeout(DEMO_S + 60)
def test_the_support_agents_story_exits_0_with_every_step_of_its_loop_ok(
    settings: Settings, kafka_bootstrap: str, redis_url: str
) -> None:
    result = story("wakeful.examples.support:app")
    assert result.stderr.count("  ok   ") == 10 and "FAIL" not in result.stderr
    for step in (
        "four calls, each once on its own op key",
        "one approval covers the refund and the notice",
        "restarted: refunded once, told once",
        "injected 5000 blocked",
    ):
        assert step in result.stderr


def test_an_app_without_a_story_is_told_so_in_one_line(settings: Settings, redis_url: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "wakeful.cli.main", "demo", "--app", "wakeful.examples.tutorial:app"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "has no demo story" in result.stderr and "Traceback" not in result.stderr
