"""The model's API key is in nothing the proposer sends on or logs, nor in a dead letter or the
model's repr, even when the server refuses the key and quotes it back (the proposer's token budget
is the real one, on Redis). The settings' side: tests/unit/test_model_key.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import pytest
from model_server import serving
from unit.test_model_key import KEY, keyed
from unit.test_model_openai import refund_window

from wakeful.consumers.proposer.main import Proposer
from wakeful.consumers.proposer.openai_model import OpenAIModel
from wakeful.core import topics
from wakeful.core.log import Log
from wakeful.core.provenance import RoleKeys, RoleSigner
from wakeful.core.settings import Settings
from wakeful.devstack.model_server import Reply
from wakeful.schemas.events import Envelope
from wakeful.state import acl
from wakeful.state.budget import Budget, Limits

CHANNEL = bytes(range(32))


class Message:
    def __init__(self, key: bytes, value: bytes, headers: list[tuple[str, Any]]) -> None:
        self._key, self._value, self._headers = key, value, headers

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value

    def headers(self) -> list[tuple[str, Any]]:
        return self._headers


class Captured:
    """Stands in for the producer and the runner: keeps what the proposer sends on."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.letters: list[str] = []

    def produce(self, topic: str, key: bytes, value: bytes) -> None:
        assert topic == topics.PROPOSALS
        self.sent.append(key + b"\n" + value)

    def dead_letter(self, msg: Any, reason: str) -> None:
        self.letters.append(reason)


def request_message() -> Message:
    request = Envelope(
        message_id="request:t-1:1",
        task_id="t-1",
        task_version=1,
        kind="proposal.request",
        created_at=datetime.now(UTC),
        trace_id="trace-1",
        payload={"window": refund_window()},
    )
    value = request.encode()
    signer = RoleSigner("gate", "gate-1", CHANNEL)
    return Message(b"t-1", value, signer.headers(topics.PROPOSALS_REQUEST, b"t-1", value))


def test_the_key_appears_in_nothing_the_proposer_sends_or_logs_even_on_a_401(
    capfd: pytest.CaptureFixture[str], settings: Settings, redis_url: str
) -> None:
    quoted = {"error": {"message": f"Incorrect API key provided: {KEY}", "code": "invalid_api_key"}}
    limited = Reply(429, {"error": {"message": f"rate limit for key {KEY}"}}, {"Retry-After": "0"})
    with serving(limited, Reply(401, quoted)) as (server, script):
        model = OpenAIModel(server.url, "m", keyed(server.url), base_delay=0.01)
        out = Captured()
        # Captured stands in for the Kafka producer and the runner: only produce/dead_letter are used.
        # The budget is the real one, on Redis as the proposer's own user: its log lines count too.
        budget = Budget(acl.connect(settings, "proposer", timeout=2.0), Limits(task=0, tenant=0))
        proposer = Proposer(
            model, cast(Any, out), Log(role="proposer"), RoleKeys({"gate-1": ("gate", CHANNEL)}), budget
        )
        proposer.runner = cast(Any, out)
        proposer.handle(cast(Any, request_message()))
    assert [r.headers["authorization"] for r in script.requests] == [f"Bearer {KEY}"] * 2
    assert len(out.sent) == 1 and not out.letters
    proposal = Envelope.decode(out.sent[0].split(b"\n", 1)[1]).payload
    assert proposal["tool"] == "none" and "HTTP 401" in proposal["failed"]
    logs = capfd.readouterr()
    assert "model.retry" in logs.err  # the retry was logged...
    for seen in (*out.sent, logs.out.encode(), logs.err.encode(), repr(model).encode()):
        assert KEY.encode() not in seen  # ...and the key nowhere
