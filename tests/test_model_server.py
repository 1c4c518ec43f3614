"""The scripted model server (`wakeful dev model-server`) speaks the chat-completions API and answers
as the stand-in models would from the window it reads back out of the messages."""

from __future__ import annotations

import os
import select
import subprocess
import sys

import httpx
import pytest
from unit.test_model_openai import GOOD, INJECTION, model, refund_window

from wakeful.consumers import model_messages
from wakeful.consumers.models import GullibleModel, RulesModel
from wakeful.devstack.model_server import ChatServer, scripted

START_S = 60.0


@pytest.mark.parametrize(("script", "stand_in"), [("rules", RulesModel), ("gullible", GullibleModel)])
@pytest.mark.parametrize("evidence", [(), ("My order arrived broken.",), (INJECTION,)])
def test_the_scripted_server_proposes_what_its_stand_in_model_does(
    script: str, stand_in: type[RulesModel], evidence: tuple[str, ...]
) -> None:
    w = refund_window(*evidence)
    with ChatServer(scripted(script)) as server:
        proposal = model(server.url).propose(w)
    expected = stand_in().propose(w)
    assert (proposal.tool, proposal.args) == (expected.tool, expected.args)
    assert proposal.args == (
        {**GOOD, "amount": 5000} if script == "gullible" and evidence == (INJECTION,) else GOOD
    )


def test_a_request_it_cannot_read_is_a_400_not_a_crash() -> None:
    with ChatServer(scripted("rules")) as server, httpx.Client(base_url=server.url) as client:
        bad = client.post("/chat/completions", json={"model": "m", "messages": []})
        still = client.post("/chat/completions", json=model_messages.request(refund_window(), "m", "0" * 16))
    assert bad.status_code == 400 and "user message" in bad.json()["error"]["message"]
    assert still.status_code == 200


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
