"""`wakeful dev model-server` serves the scripted model in a process of its own until it is stopped."""

from __future__ import annotations

import os
import select
import subprocess
import sys

from unit.test_model_openai import GOOD, model, refund_window

START_S = 60.0


def test_wakeful_dev_model_server_serves_until_stopped() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "wakeful.cli.main", "dev", "model-server", "--port", "0", "--script", "rules"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], START_S)  # it prints where it listens
        assert ready, f"no address printed within {START_S}s"
        told = dict(part.split("=", 1) for part in proc.stdout.readline().split())
        assert told["WAKEFUL_MODEL"] == "openai" and told["WAKEFUL_MODEL_NAME"] == "scripted"
        proposal = model(told["WAKEFUL_MODEL_URL"]).propose(refund_window())
        assert (proposal.tool, proposal.args) == ("refund", GOOD)
    finally:
        proc.terminate()
        proc.wait(timeout=START_S)
    assert proc.returncode == 0
