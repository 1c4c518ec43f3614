"""An HMAC signer's secret is sealed at rest: only the seal opens it, only for its own key id and
alg; a record read without the seal holds no secret, and nothing verifies against it (not even a
tag made with an empty key); a record of the release before still verifies (docs/decisions.md D91)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from wakeful.authority import signer_seal
from wakeful.authority.signer_seal import HMAC, SignerSeal, sealed_record
from wakeful.authority.snapshot import decode_signer
from wakeful.core.errors import ConfigError
from wakeful.core.settings import Settings
from wakeful.producers import reads
from wakeful.producers.signing import HmacSigner, sign_event
from wakeful.schemas import webhook
from wakeful.schemas.events import CREATE, SignedEvent

SECRET = b"the-payroll-systems-webhook-secret"
SEAL = SignerSeal({"s-1": bytes(range(32))}, "s-1")
OTHER = SignerSeal({"s-1": bytes(range(1, 33))}, "s-1")
SEALED = SEAL.seal("hmac-payroll", HMAC, SECRET)


def record(**fields: object) -> bytes:
    doc = {"principal": "payroll", "alg": HMAC, "kinds": [CREATE], "tenant": "default", **fields}
    return orjson.dumps(doc)


def edited(sealed: str) -> str:
    head, _, b64 = sealed.rpartition(":")
    raw = bytearray(base64.b64decode(b64))
    raw[-1] ^= 1
    return f"{head}:{base64.b64encode(bytes(raw)).decode()}"


@pytest.mark.parametrize(
    ("seal", "key_id", "alg", "sealed", "opens"),
    [
        (SEAL, "hmac-payroll", HMAC, SEALED, True),
        (SEAL, "hmac-billing", HMAC, SEALED, False),  # moved onto another signer's record
        (SEAL, "hmac-payroll", "ed25519", SEALED, False),  # its alg changed
        (OTHER, "hmac-payroll", HMAC, SEALED, False),  # another seal's key under the same id
        (SEAL, "hmac-payroll", HMAC, edited(SEALED), False),
        (SEAL, "hmac-payroll", HMAC, SEALED.replace("s-1", "s-2", 1), False),  # a seal key it lacks
        (SEAL, "hmac-payroll", HMAC, "v2" + SEALED[2:], False),
        (SEAL, "hmac-payroll", HMAC, "v1:s-1:not base64!", False),
        (SEAL, "hmac-payroll", HMAC, "", False),
    ],
)
def test_a_sealed_secret_opens_only_with_its_seal_for_its_own_key_id_and_alg(
    seal: SignerSeal, key_id: str, alg: str, sealed: str, opens: bool
) -> None:
    assert seal.open(key_id, alg, sealed) == (SECRET if opens else None)


def test_a_sealed_record_holds_no_trace_of_the_secret_and_an_ed25519_record_is_left_as_it_is() -> None:
    plain = {"alg": HMAC, "principal": "p", "material": base64.b64encode(SECRET).decode()}
    out = orjson.dumps(sealed_record(plain, "hmac-payroll", SEAL))
    assert b"material" not in out and SECRET not in out and base64.b64encode(SECRET) not in out
    public = {"alg": "ed25519", "principal": "p", "material": "AAAA"}
    assert sealed_record(public, "key-p", SEAL) == public


def event_by(secret: bytes) -> SignedEvent:
    return sign_event(HmacSigner("hmac-payroll", secret), CREATE, {}, task_id="t-1")


def posted(secret: bytes) -> SignedEvent:
    body = orjson.dumps({"kind": CREATE, "task_id": "t-1", "event_id": "wh-00000001", "payload": {}})
    t = int(time.time())
    tags = webhook.parse_header(webhook.header(secret, t, body))
    assert not isinstance(tags, str)
    return webhook.opened(webhook.wrap("hmac-payroll", t, tags[1], body))


@pytest.mark.parametrize(
    ("stored", "seal", "signed_with", "verifies"),
    [
        (record(sealed=SEALED), SEAL, SECRET, True),
        (record(sealed=SEALED), None, SECRET, False),  # a role without the seal checks nothing
        (record(sealed=SEALED), None, b"", False),  # ... not even a tag made with an empty key
        (record(sealed=SEALED), OTHER, b"", False),
        (record(sealed=SEALED), SEAL, SEALED.encode(), False),  # the sealed text is no key
        (record(material=base64.b64encode(SECRET).decode()), None, SECRET, True),  # the release before's
        (record(material=base64.b64encode(SECRET).decode()), SEAL, SECRET, True),
    ],
)
def test_a_signer_record_verifies_only_what_its_real_secret_signed(
    stored: bytes, seal: SignerSeal | None, signed_with: bytes, verifies: bool
) -> None:
    key, _ = decode_signer("hmac-payroll", stored, seal)
    assert key.verify(event_by(signed_with)) is verifies
    assert key.verify(posted(signed_with)) is verifies
    target, t = "/v1/receipts/wh-1?task_id=t-1", int(time.time())
    tag = hmac.new(signed_with, f"{t}.GET {target}".encode(), hashlib.sha256).hexdigest()
    why = reads.verified_webhook(
        key, key_id="hmac-payroll", signed=(t, [tag]), method="GET", target=target, now=datetime.now(UTC)
    )
    assert (why is None) is verifies, why


def test_each_verifier_gets_the_admins_seal_and_no_other_role_gets_one(tmp_path: Path) -> None:
    settings = Settings.from_env({"WAKEFUL_HOME": str(tmp_path)})
    active = signer_seal.ensure(settings)
    assert signer_seal.ensure(settings) == active  # kept, not made again
    admin = signer_seal.load(settings, signer_seal.KEEPER)
    for role in signer_seal.VERIFIERS:
        assert signer_seal.load(settings, role).open("k", HMAC, admin.seal("k", HMAC, SECRET)) == SECRET
    for role in ("executor", "timer", "relay", "proposer", "upstream"):
        assert signer_seal.held(settings, role) is None
        with pytest.raises(ConfigError):
            signer_seal.load(settings, role)
