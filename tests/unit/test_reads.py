"""Signed reads (producers/reads.py): a read proves who asks, for this very request, now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from wakeful.producers import reads
from wakeful.producers.keys import generate_signer, public_bytes
from wakeful.producers.signing import Ed25519Signer, sign_event
from wakeful.schemas.events import SignedEvent
from wakeful.schemas.signatures import VerifyKey


def now() -> datetime:
    return datetime.now(UTC)


TARGET = "/v1/tasks?stage=closed&limit=5"


@pytest.fixture()
def signer(tmp_path: Path) -> Ed25519Signer:
    return generate_signer("key-desk", tmp_path / "desk.key")


def key_of(signer: Ed25519Signer, principal: str = "desk") -> VerifyKey:
    return VerifyKey(signer.key_id, "ed25519", public_bytes(signer), principal, "default")


def claimed(header: str) -> SignedEvent:
    event = reads.claimed(header)
    assert isinstance(event, SignedEvent), event
    return event


def test_a_read_signed_for_this_request_now_verifies(signer: Ed25519Signer) -> None:
    event = claimed(reads.sign(signer, "get", TARGET))
    assert reads.verified(event, key_of(signer), "GET", TARGET, now()) is None


@pytest.mark.parametrize(
    ("method", "target", "at", "why"),
    [
        ("POST", TARGET, timedelta(0), "names another request"),
        ("GET", "/v1/tasks?stage=closed&limit=6", timedelta(0), "names another request"),
        ("GET", TARGET, timedelta(minutes=2), "sign each request when it is sent"),
        ("GET", TARGET, -timedelta(minutes=2), "sign each request when it is sent"),
    ],
)
def test_a_read_for_another_request_or_time_is_refused(
    signer: Ed25519Signer, method: str, target: str, at: timedelta, why: str
) -> None:
    event = claimed(reads.sign(signer, "GET", TARGET))
    refused = reads.verified(event, key_of(signer), method, target, now() + at)
    assert refused is not None and why in refused


def test_a_read_by_an_unknown_key_or_signed_by_another_is_refused(
    signer: Ed25519Signer, tmp_path: Path
) -> None:
    event = claimed(reads.sign(signer, "GET", TARGET))
    assert "unknown key id" in (reads.verified(event, None, "GET", TARGET, now()) or "")
    other = generate_signer("key-desk", tmp_path / "other.key")  # the same key id, another key
    assert "bad signature" in (reads.verified(event, key_of(other), "GET", TARGET, now()) or "")


def test_an_event_of_another_kind_is_no_read(signer: Ed25519Signer) -> None:
    event = sign_event(signer, "task.create", {"method": "GET", "target": TARGET})
    assert "a read is signed as kind" in (reads.verified(event, key_of(signer), "GET", TARGET, now()) or "")


@pytest.mark.parametrize(
    ("header", "why"),
    [
        (None, "no X-Wakeful-Read"),
        ("", "no X-Wakeful-Read"),
        ("!!", "not a signed read"),
        ("e30=", "not a signed read"),
        ("A" * 5000, "over"),
    ],
)
def test_a_header_that_carries_no_signed_read_says_why(header: str | None, why: str) -> None:
    found = reads.claimed(header)
    assert isinstance(found, str) and why in found
