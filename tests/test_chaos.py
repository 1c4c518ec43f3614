"""`wakeful chaos`, small: random workers SIGKILLed while tasks run; no task lost, no effect twice."""

from __future__ import annotations

import subprocess
import sys

import orjson

from wakeful.core.settings import Settings


def test_random_kills_lose_no_task_and_duplicate_no_effect(
    settings: Settings, kafka_bootstrap: str, redis_url: str
) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "wakeful.cli.main",
            "chaos",
            "--tasks",
            "80",
            "--kills",
            "8",
            "--seed",
            "7",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    report = orjson.loads(result.stdout)
    assert report["ok"] and report["kills"] == 8
    assert (report["lost"], report["duplicate_effects"], report["misapplied_events"]) == (0, 0, 0)
    assert report["refunded"] == 80 and report["stages"] == {"closed": 80}
