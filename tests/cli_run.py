"""The CLI run as an operator runs it, in its own process, able to import the tests' own apps."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

TESTS = Path(__file__).resolve().parent


def with_tests_on_path(env: dict[str, str]) -> dict[str, str]:
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(TESTS)) if p)}


def wakeful(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wakeful.cli.main", *argv],
        env=with_tests_on_path(dict(os.environ)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def doc(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """What a command printed with --json."""
    found: dict[str, Any] = orjson.loads(result.stdout)
    return found
