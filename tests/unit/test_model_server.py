"""The scripted model server (`wakeful dev model-server`) speaks the chat-completions API and answers
as the stand-in models would from the window it reads back out of the messages. Here in this
process; the command itself: tests/test_model_server_command.py."""

from __future__ import annotations

import httpx
import pytest
from unit.test_model_openai import GOOD, INJECTION, model, refund_window

from wakeful.consumers.proposer import messages as model_messages
from wakeful.consumers.proposer.models import GullibleModel, RulesModel
from wakeful.devstack.model_server import ChatServer, scripted


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
