"""The README's first command runs the main job: `wakeful demo` exits 0 with every step ok."""

from __future__ import annotations

import subprocess
import sys

from wakeful.core.settings import Settings


def test_readme_first_command_wakeful_demo_exits_0(
    settings: Settings, kafka_bootstrap: str, redis_url: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "wakeful.cli.main", "demo"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "demo ok" in result.stdout
    assert result.stderr.count("  ok   ") == 9 and "FAIL" not in result.stderr
