"""An app's own code imports the SDK, and an upstream the wire models: neither drags in a client of
Kafka or Redis (the import layers themselves: import-linter's contracts in pyproject.toml, checked
by scripts/lint)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CLIENTS = ("redis", "confluent_kafka", "kafka")


@pytest.mark.parametrize(
    "module",
    [
        "wakeful.sdk",
        "wakeful.schemas.events",
        "wakeful.schemas.checkpoint",
        "wakeful.core.settings",
        "wakeful.core.retry",
        "wakeful.core.topics",
        "wakeful.core.provenance",
    ],
)
def test_importing_the_sdk_the_wire_models_or_core_loads_no_server_client(module: str) -> None:
    probe = f"import sys, {module}; print(','.join(m for m in {CLIENTS!r} if m in sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    ).stdout.strip()
    assert loaded == "", f"import {module} loaded {loaded}"
