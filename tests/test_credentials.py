"""Each role's Redis password is in its own secrets folder and a role's process opens no other (the
files themselves, and an old state dir's upgrade: tests/unit/test_credential_files.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from wakeful.consumers.kafka.supervisor import ROLES as PROCESS_ROLES
from wakeful.core.settings import Settings
from wakeful.state import credentials

# The executor's process also holds the bank's credential: the tool credential of its downstream.
OWN_FOLDERS = {role: {role} for role in PROCESS_ROLES} | {"executor": {"executor", "bank"}}

# Runs one role's main() with stop already set (it builds every client, then returns at once), and
# prints every file it opened under the secrets folder.
_PROBE = """
import importlib, json, os, sys, threading
from wakeful.core.settings import Settings
settings = Settings.from_env()
root, opened = str(settings.secrets), set()

def seen(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.fsdecode(os.fspath(args[0]))
        if path.startswith(root):
            opened.add(os.path.relpath(path, root))

sys.addaudithook(seen)
stop = threading.Event()
stop.set()
importlib.import_module(f"wakeful.consumers.{sys.argv[1]}.main").main(settings, stop)
print(json.dumps(sorted(opened)))
"""


@pytest.mark.parametrize("role", PROCESS_ROLES)
def test_a_role_process_reads_only_its_own_credential(role: str, settings: Settings, redis_url: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, role], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    opened = orjson.loads(result.stdout.strip().splitlines()[-1])
    folders = {Path(path).parts[0] for path in opened}
    assert folders <= OWN_FOLDERS[role], f"{role} opened {opened}"
    assert f"{role}/{credentials.NAME}.json" in opened, f"{role} never read its own credential: {opened}"
