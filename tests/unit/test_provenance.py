"""Messages between roles carry their sender's channel tag, and only the roles DESIGN §2 names for a
topic may send on it (pure: no Kafka, no Redis)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wakeful.core import kafka_rights, provenance, secrets, topics
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
    return provenance.load_keys(s, provenance.READERS[topic]).sender(topic, key, value, headers)


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
    assert isinstance(verdict, Forged) and "not a key of" in verdict.reason


def test_a_reader_that_was_given_a_key_of_the_wrong_role_still_refuses_it(settings: Settings) -> None:
    gate_key = secrets.load(settings, "proposer", "verifying")
    planted = secrets.load(settings, "gate", "verifying") | gate_key
    secrets.replace(settings, "gate", "verifying", planted)
    verdict = _sender(settings, topics.WAKE, _signed(settings, "gate", topics.WAKE))
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
    assert isinstance(verdict, Forged) and "not a key of" in verdict.reason


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
        provenance.load_keys(s, "gate")


def test_a_channel_key_is_held_by_its_sender_and_its_topics_one_reader_only(settings: Settings) -> None:
    holders: dict[str, set[str]] = {}
    for role in (*provenance.SIGNING_ROLES, "executor", kafka_rights.ADMIN):
        held = [secrets.load(settings, role, "signing")["key"]] if role in provenance.SIGNING_ROLES else []
        if secrets.exists(settings, role, "verifying"):
            held += [entry.rpartition(":")[2] for entry in secrets.load(settings, role, "verifying").values()]
        for key in held:
            holders.setdefault(key, set()).add(role)
    assert sorted(map(sorted, holders.values())) == sorted(
        sorted({sender, provenance.READERS[topic]})
        for topic, senders in provenance.SENDERS.items()
        for sender in senders
    )


def test_a_state_dir_with_ed25519_role_keys_gets_channel_keys_at_the_next_setup(tmp_path: Path) -> None:
    s = Settings.from_env({"WAKEFUL_HOME": str(tmp_path)})
    secrets.replace(s, "gate", "signing", {"key_id": "gate-old", "seed": "AAAA"})
    secrets.replace(s, "public", "roles", {"gate-old": "gate:AAAA"})
    assert "gate" in provenance.ensure_keys(s)
    assert _sender(s, topics.PROPOSALS_REQUEST, _signed(s, "gate", topics.PROPOSALS_REQUEST)) == "gate"
    assert not secrets.path(s, "public", "roles").parent.exists()


def test_every_internal_topic_has_exactly_its_designed_senders() -> None:
    assert {
        topics.WAKE: {"inbound", "timer"},
        topics.PROPOSALS_REQUEST: {"gate"},
        topics.PROPOSALS: {"proposer"},
        topics.LOG: {"relay"},
    } == provenance.SENDERS
    assert set().union(*provenance.SENDERS.values()) == set(provenance.SIGNING_ROLES)


def test_every_internal_topic_has_one_reader_the_broker_lets_read_it() -> None:
    assert provenance.READERS == {
        topics.WAKE: "gate",
        topics.PROPOSALS_REQUEST: "proposer",
        topics.PROPOSALS: "executor",
        topics.LOG: kafka_rights.ADMIN,
    }
