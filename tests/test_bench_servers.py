"""`wakeful bench` counts the CPU of the engines this machine runs for it, and of no other (what it
charges the tasks: tests/unit/test_bench_charges.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from wakeful.bench.box import server_cpu
from wakeful.core.settings import Settings


def test_bench_counts_the_engines_run_here_and_no_server_run_elsewhere(
    settings: Settings, kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    if settings.kafka_bootstrap_external or settings.redis_url_external:
        pytest.skip("the servers are run elsewhere: there is no local process to count")
    before = server_cpu(settings)
    assert set(before) == {"kafka", "kafka_jit", "redis"}
    assert before["kafka"] > 0 and before["redis"] > 0
    assert 0 < before["kafka_jit"] < before["kafka"]  # a broker that has started has compiled code
    since = server_cpu(settings, since=before)
    assert set(since) == {"kafka", "kafka_jit", "redis"} and all(seconds >= 0 for seconds in since.values())
    assert server_cpu(replace(settings, home=tmp_path)) == {}  # no pid files: nothing run here
