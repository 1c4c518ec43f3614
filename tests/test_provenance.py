"""Messages between roles carry their sender's signature, and only the roles DESIGN §2 names for a
topic may send on it (pure: no Kafka, no Redis)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wakeful.core import provenance, secrets, topics
from wakeful.core.errors import ConfigError
from wakeful.core.provenance import Forged
from wakeful.core.settings import Settings

KEY, VALUE = b"t-1", b'{"kind":"wake"}'


@pytest.fixture()
def settings(tmp_path: Path) -> Settings:
    s = Settings.from_env({"WAKEFUL_HOME": str(tmp_path)})
    provenance.ensure_keys(s)
    return s


def _sender(s: Settings, topic: str, headers: object, key: bytes = KEY, value: bytes = VALUE) -> str | Forged:
    return provenance.load_keys(s).sender(topic, key, value, headers)


def _signed(s: Settings, role: str, topic: str) -> list[tuple[str, str | bytes | None]]:
    return provenance.load_signer(s, role).headers(topic, KEY, VALUE)


@pytest.mark.parametrize(
    ("topic", "role"),
    [
        (topics.WAKE, "inbound"),
        (topics.WAKE, "timer"),
        (topics.PROPOSALS_REQUEST, "gate"),
        (topics.PROPOSALS, "proposer"),
        (topics.LOG, "relay"),
    ],
)
def test_a_role_may_send_on_its_own_output_topic(settings: Settings, topic: str, role: str) -> None:
    assert _sender(settings, topic, _signed(settings, role, topic)) == role


@pytest.mark.parametrize(
    ("topic", "role"),
    [
        (topics.WAKE, "gate"),
        (topics.WAKE, "proposer"),
        (topics.PROPOSALS_REQUEST, "inbound"),
        (topics.PROPOSALS, "gate"),
        (topics.PROPOSALS, "inbound"),
        (topics.PROPOSALS_REQUEST, "proposer"),
    ],
)
def test_a_role_key_cannot_vouch_for_another_roles_topic(settings: Settings, topic: str, role: str) -> None:
    verdict = _sender(settings, topic, _signed(settings, role, topic))
    assert isinstance(verdict, Forged) and "may not send" in verdict.reason


def test_an_unsigned_message_between_roles_is_forged(settings: Settings) -> None:
    for topic in provenance.SENDERS:
        for headers in (None, [], [("other", b"x")]):
            verdict = _sender(settings, topic, headers)
            assert isinstance(verdict, Forged) and "unsigned" in verdict.reason


def test_a_signature_does_not_follow_its_message_to_another_topic_key_or_body(settings: Settings) -> None:
    headers = _signed(settings, "inbound", topics.WAKE)
    assert isinstance(_sender(settings, topics.PROPOSALS, headers), Forged)
    assert isinstance(_sender(settings, topics.WAKE, headers, key=b"t-2"), Forged)
    assert isinstance(_sender(settings, topics.WAKE, headers, value=VALUE + b" "), Forged)


def test_a_second_signature_header_is_refused(settings: Settings) -> None:
    headers = _signed(settings, "inbound", topics.WAKE) + _signed(settings, "timer", topics.WAKE)
    verdict = _sender(settings, topics.WAKE, headers)
    assert isinstance(verdict, Forged) and "more than one" in verdict.reason


def test_a_key_that_is_not_registered_is_refused(settings: Settings, tmp_path: Path) -> None:
    other = Settings.from_env({"WAKEFUL_HOME": str(tmp_path / "elsewhere")})
    provenance.ensure_keys(other)
    verdict = _sender(settings, topics.WAKE, _signed(other, "inbound", topics.WAKE))
    assert isinstance(verdict, Forged) and "unknown role key" in verdict.reason


def test_a_valid_header_name_with_garbage_is_refused(settings: Settings) -> None:
    kid = provenance.load_signer(settings, "gate").key_id.encode()
    for sig in (b"", b"\x00" * 64, b"x" * 1000):
        headers = [(provenance.KID_HEADER, kid), (provenance.SIG_HEADER, sig)]
        assert isinstance(_sender(settings, topics.PROPOSALS_REQUEST, headers), Forged)


def test_keys_are_made_once_and_a_rerun_keeps_them(settings: Settings) -> None:
    before = provenance.load_signer(settings, "gate").key_id
    assert provenance.ensure_keys(settings) == []
    assert provenance.load_signer(settings, "gate").key_id == before


def test_a_retired_key_stays_verifiable_after_rotation(settings: Settings) -> None:
    old = _signed(settings, "gate", topics.PROPOSALS_REQUEST)
    secrets.path(settings, "gate", "signing").unlink()
    assert provenance.ensure_keys(settings) == ["gate"]
    assert _sender(settings, topics.PROPOSALS_REQUEST, old) == "gate"


def test_a_missing_role_key_says_how_to_make_it(tmp_path: Path) -> None:
    s = Settings.from_env({"WAKEFUL_HOME": str(tmp_path)})
    with pytest.raises(ConfigError, match="wakeful dev up"):
        provenance.load_signer(s, "gate")
    with pytest.raises(ConfigError, match="wakeful dev up"):
        provenance.load_keys(s)


def test_the_public_file_holds_no_private_key(settings: Settings) -> None:
    public = secrets.load(settings, secrets.PUBLIC, "roles")
    seeds = {secrets.load(settings, r, "signing")["seed"] for r in provenance.SIGNING_ROLES}
    assert len(public) == len(provenance.SIGNING_ROLES)
    assert not any(seed in entry for entry in public.values() for seed in seeds)


def test_every_internal_topic_has_exactly_its_designed_senders() -> None:
    assert {
        topics.WAKE: {"inbound", "timer"},
        topics.PROPOSALS_REQUEST: {"gate"},
        topics.PROPOSALS: {"proposer"},
        topics.LOG: {"relay"},
    } == provenance.SENDERS
    assert set().union(*provenance.SENDERS.values()) == set(provenance.SIGNING_ROLES)
