"""The model's API key goes into the Authorization header and nowhere else: not into what the
proposer sends on, its logs, a dead letter, the settings' repr or an error, even when the server
refuses the key and quotes it back. And the openai model's settings fail loudly, naming what to set."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
from model_server import serving
from pydantic import SecretStr
from unit.test_model_openai import refund_window

from wakeful.consumers.model_openai import OpenAIModel
from wakeful.consumers.models import make_model
from wakeful.consumers.proposer import Proposer
from wakeful.core import topics
from wakeful.core.errors import ConfigError
from wakeful.core.log import Log
from wakeful.core.provenance import RoleKeys, RoleSigner
from wakeful.core.settings import Settings
from wakeful.devstack.model_server import Reply
from wakeful.schemas.events import Envelope
from wakeful.state import acl
from wakeful.state.budget import Budget, Limits

KEY = "sk-test-4f1c9a7e2b8d6035e1aa90c7"
CHANNEL = bytes(range(32))
BASE = {"WAKEFUL_HOME": "/tmp/wakeful-model-key-test", "WAKEFUL_MODEL": "openai"}


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


def test_a_server_error_that_quotes_the_key_is_scrubbed_before_it_is_cut() -> None:
    said = {"error": {"message": "x" * 190 + KEY}}
    with serving(Reply(400, said)) as (server, _):
        proposal = OpenAIModel(server.url, "m", keyed(server.url)).propose(refund_window())
    assert proposal.failed is not None and "HTTP 400" in proposal.failed
    assert KEY[:12] not in proposal.failed


def url(base: str) -> dict[str, str]:
    return {"WAKEFUL_MODEL_URL": base, "WAKEFUL_MODEL_NAME": "m"}


def keyed(base: str) -> SecretStr | None:
    """The key as the settings read it from OPENAI_API_KEY."""
    return Settings.from_env({**BASE, **url(base), "OPENAI_API_KEY": KEY}).model_key


def test_the_key_is_read_from_its_file_first_and_never_shown_by_the_settings(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    env = {
        **BASE,
        **url("http://127.0.0.1:9/v1"),
        "WAKEFUL_MODEL_KEY_FILE": str(key_file),
        "OPENAI_API_KEY": "other",
    }
    settings = Settings.from_env(env)
    assert settings.model_key is not None and settings.model_key.get_secret_value() == KEY
    assert KEY not in repr(settings) and KEY not in str(settings)
    assert make_model(settings).name == "openai:m"


def test_a_local_server_needs_no_key() -> None:
    settings = Settings.from_env({**BASE, **url("http://127.0.0.1:9/v1/")})
    assert settings.model_key is None and settings.model_url == "http://127.0.0.1:9/v1"


@pytest.mark.parametrize(
    ("env", "setting", "says"),
    [
        ({}, "WAKEFUL_MODEL_URL", "needs the server's chat-completions base URL"),
        ({"WAKEFUL_MODEL_URL": "http://127.0.0.1:9/v1"}, "WAKEFUL_MODEL_NAME", "needs the name"),
        ({**url("ftp://host/v1")}, "WAKEFUL_MODEL_URL", "not an http:// or https:// URL"),
        ({**url(f"https://user:{KEY}@host/v1")}, "WAKEFUL_MODEL_URL", "holds credentials"),
        (
            {**url("http://h/v1"), "WAKEFUL_MODEL_KEY_FILE": "/nonexistent/key"},
            "WAKEFUL_MODEL_KEY_FILE",
            "cannot read",
        ),
        ({**url("http://h/v1"), "WAKEFUL_MODEL_TIMEOUT": "0"}, "WAKEFUL_MODEL_TIMEOUT", "outside"),
        ({**url("http://h/v1"), "WAKEFUL_MODEL_ATTEMPTS": "many"}, "WAKEFUL_MODEL_ATTEMPTS", "whole number"),
    ],
)
def test_the_openai_model_without_what_it_needs_stops_naming_the_setting(
    env: dict[str, str], setting: str, says: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({**BASE, **env})
    assert caught.value.setting == setting and says in str(caught.value)
    assert KEY not in str(caught.value)


def test_other_models_ignore_the_model_server_settings() -> None:
    settings = Settings.from_env(
        {"WAKEFUL_HOME": BASE["WAKEFUL_HOME"], "WAKEFUL_MODEL_KEY_FILE": "/nonexistent"}
    )
    assert settings.model == "rules" and settings.model_key is None
