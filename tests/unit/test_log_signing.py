"""The relay's public-key signature on wakeful.log (core/log_signing.py, D72): made once, checkable
with the public half alone, still checkable after a rotation, and naming the record edited."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from wakeful.core import log_signing, provenance, secrets, topics
from wakeful.core.settings import Settings
from wakeful.schemas.logs import LOG_BATCH_HEAD, LOG_BATCH_TAIL

pytestmark = pytest.mark.timeout(30)
FRAME = (LOG_BATCH_HEAD, LOG_BATCH_TAIL)
RECORDS = [b'{"record_id":"t:1","n":1}', b'{"record_id":"t:2","n":22}', b'{"record_id":"t:3","n":333}']


@pytest.fixture()
def settings(tmp_path: Path) -> Settings:
    s = Settings.from_env({"WAKEFUL_HOME": str(tmp_path)})
    provenance.ensure_keys(s)
    return s


def _value(records: list[bytes]) -> bytes:
    return LOG_BATCH_HEAD + b",".join(records) + LOG_BATCH_TAIL


def test_the_log_key_is_made_once_its_private_half_only_in_the_relay_s_folder(settings: Settings) -> None:
    first = log_signing.load_log_signer(settings)
    assert log_signing.ensure_log_key(settings) is False
    assert log_signing.load_log_signer(settings).key_id == first.key_id
    assert log_signing.public_log_keys(settings) == {first.key_id: first.public()}
    seed = secrets.load(settings, "relay", "log-signing")["seed"]
    holders = [p for p in settings.secrets.rglob("*.json") if seed in p.read_text()]
    assert holders == [secrets.path(settings, "relay", "log-signing")]


def test_a_message_verifies_with_the_public_key_alone_and_not_on_another_topic(settings: Settings) -> None:
    signer, public = log_signing.load_log_signer(settings), log_signing.public_log_keys(settings)
    headers = signer.headers(topics.LOG, RECORDS)
    assert log_signing.check(public, topics.LOG, _value(RECORDS), headers, FRAME).reason is None
    moved = log_signing.check(public, topics.DLQ, _value(RECORDS), headers, FRAME)
    assert moved.reason is not None and "does not verify" in moved.reason
    assert log_signing.check(public, topics.LOG, _value(RECORDS), [], FRAME).reason is not None


@pytest.mark.parametrize(
    ("edit", "changed"),
    [
        (lambda v: v.replace(b'"n":22', b'"n":23'), (1,)),  # same length
        (lambda v: v.replace(b'"n":22', b'"n":2222222'), (1,)),  # longer
        (lambda v: v.replace(b'"n":1}', b'"n":}'), (0,)),  # shorter, first
        (lambda v: v.replace(b'"n":333', b'"n":3'), (2,)),  # shorter, last
        (lambda v: v.replace(b',{"record_id":"t:2","n":22}', b""), (1,)),  # dropped
    ],
)
def test_an_edit_names_the_record_edited(
    settings: Settings, edit: Callable[[bytes], bytes], changed: tuple[int, ...]
) -> None:
    signer, public = log_signing.load_log_signer(settings), log_signing.public_log_keys(settings)
    headers = signer.headers(topics.LOG, RECORDS)
    checked = log_signing.check(public, topics.LOG, edit(_value(RECORDS)), headers, FRAME)
    assert checked.reason is not None and checked.changed == changed


def test_what_a_retired_key_signed_still_verifies_after_a_rotation(settings: Settings) -> None:
    old = log_signing.load_log_signer(settings)
    headers = old.headers(topics.LOG, RECORDS)
    new_id = log_signing.rotate_log_key(settings)
    public = log_signing.public_log_keys(settings)
    assert new_id != old.key_id and set(public) == {old.key_id, new_id}
    assert log_signing.check(public, topics.LOG, _value(RECORDS), headers, FRAME).reason is None
    assert log_signing.load_log_signer(settings).key_id == new_id
