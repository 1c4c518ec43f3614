"""The model's API key goes into the Authorization header and nowhere else: not into the settings'
repr or an error, even when the server quotes it back. And the openai model's settings fail loudly,
naming what to set. What the proposer sends on and logs: tests/test_model_key_proposer.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from model_server import serving
from pydantic import SecretStr
from unit.test_model_openai import refund_window

from wakeful.consumers.proposer.models import make_model
from wakeful.consumers.proposer.openai_model import OpenAIModel
from wakeful.core.errors import ConfigError
from wakeful.core.settings import Settings
from wakeful.devstack.model_server import Reply

KEY = "sk-test-4f1c9a7e2b8d6035e1aa90c7"
BASE = {"WAKEFUL_HOME": "/tmp/wakeful-model-key-test", "WAKEFUL_MODEL": "openai"}


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
