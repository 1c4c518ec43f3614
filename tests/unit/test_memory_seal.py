"""A memory record's seal and its verifier's event (state/memory_seal.py, D93): a record sealed by
the keyring verifies, under a retired key too; any field changed after sealing, a missing seal or a
key the keyring lacks does not; an active high-impact record is vouched for only by the signed event
its provenance names, signed by its writer and verifier, of its tenant, under a registered key."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from wakeful.producers.signing import Ed25519Signer, sign_event
from wakeful.schemas.memory import Change, MemoryRecord, Status
from wakeful.schemas.signatures import VerifyKey
from wakeful.state import memory_seal
from wakeful.state.seal import Keyring
from wakeful.workflow import memory

pytestmark = pytest.mark.unit
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RING = Keyring.generate()
SIGNER = Ed25519Signer.from_seed("key-verifier", b"\x01" * 32)
OTHER = Ed25519Signer.from_seed("key-verifier", b"\x02" * 32)
EVENT = sign_event(SIGNER, "account.verified", {"account": "DE89"}, task_id="t-1", event_id="ev-00000001")


def record(**change: Any) -> MemoryRecord:
    base = MemoryRecord(
        id="m-" + "a" * 24,
        tenant="default",
        subject="supplier:acme",
        fact="remittance_account",
        value="DE89",
        writer="principal:verifier",
        provenance="event:key-verifier:ev-00000001",
        task_id="t-1",
        status=Status.ACTIVE,
        verified_by="principal:verifier",
        created_at=NOW,
        expires_at=NOW + timedelta(days=30),
        history=(Change(status=Status.ACTIVE, by="write door", reason="verifier", at=NOW),),
        event=EVENT.encode().decode(),
    )
    return base.model_copy(update=change)


SEALED = memory_seal.sealed(RING, record())


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({}, None),
        ({"status": Status.QUARANTINED}, "does not verify"),
        ({"value": "GB33"}, "does not verify"),
        ({"writer": "principal:crm"}, "does not verify"),
        ({"provenance": "event:key-verifier:ev-00000002"}, "does not verify"),
        ({"verified_by": "principal:crm"}, "does not verify"),
        ({"expires_at": NOW + timedelta(days=3000)}, "does not verify"),
        ({"history": ()}, "does not verify"),
        ({"event": None}, "does not verify"),
        ({"seal": None}, "no seal"),
        ({"seal": "k9:" + base64.b64encode(b"x" * 32).decode()}, "which this keyring lacks"),
        ({"seal": "k1:not base64!"}, "not base64"),
    ],
)
def test_a_record_passes_its_seal_only_as_its_writer_sealed_it(
    change: dict[str, Any], said: str | None
) -> None:
    found = memory_seal.seal_problem(RING, SEALED.model_copy(update=change))
    assert (found is None) if said is None else (found is not None and said in found)


def test_a_record_sealed_before_a_rotation_still_verifies_and_decodes_as_stored() -> None:
    rotated = RING.rotated()
    assert memory_seal.seal_problem(rotated, SEALED) is None
    assert memory_seal.seal_problem(rotated, MemoryRecord.decode(SEALED.encode())) is None
    assert memory_seal.seal_problem(Keyring.generate(), SEALED) is not None  # another keyring's k1


def _raw(signer: Ed25519Signer) -> bytes:
    return signer.private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def key(signer: Ed25519Signer = SIGNER, principal: str = "verifier", tenant: str = "default") -> VerifyKey:
    return VerifyKey(signer.key_id, "ed25519", _raw(signer), principal, tenant)


OTHER_EVENT = sign_event(
    SIGNER, "account.verified", {"account": "GB33"}, task_id="t-1", event_id="ev-00000002"
)
FORGED = EVENT.model_copy(update={"payload": {"account": "GB33"}})


@pytest.mark.parametrize(
    ("change", "signer", "said"),
    [
        ({}, key(), None),
        ({"event": None}, key(), "carries no verifier's signed event"),
        ({"event": "{not json"}, key(), "does not decode"),
        ({"event": OTHER_EVENT.encode().decode()}, key(), "not the one its provenance names"),
        ({}, None, "is not registered"),
        ({"event": FORGED.encode().decode()}, key(), "does not verify"),
        ({}, key(OTHER), "does not verify"),
        ({}, key(principal="crm"), "not by its writer and verifier"),
        ({"writer": "principal:crm"}, key(), "not by its writer and verifier"),
        ({}, key(tenant="acme"), "signs for tenant acme"),
    ],
)
def test_an_active_high_impact_record_stands_only_on_its_verifiers_signed_event(
    change: dict[str, Any], signer: VerifyKey | None, said: str | None
) -> None:
    found = memory_seal.event_problem(record(**change), signer)
    assert (found is None) if said is None else (found is not None and said in found)


def test_what_a_tool_taught_keeps_its_executors_seal_through_the_door_and_nothing_else_does() -> None:
    taught = memory.learned_form(record(writer="role:executor", provenance="op:REFUND:t-1:v1"))
    kept = memory.learned_form(memory_seal.sealed(RING, taught))
    assert kept.seal is not None and memory_seal.seal_problem(RING, kept) is None
    # an active record on a close is rewritten quarantined by the door, and its seal goes with it
    claimed = memory_seal.sealed(RING, record(writer="role:executor", provenance="op:REFUND:t-1:v1"))
    rewritten = memory.learned_form(claimed)
    assert rewritten.status is Status.QUARANTINED and rewritten.seal is None


class Registry:
    """The signer registry as the gate's login reads it: one HGET."""

    def __init__(self, records: dict[str, bytes]) -> None:
        self.records = records

    def hget(self, _name: str, key_id: str) -> bytes | None:
        return self.records.get(key_id)


def test_a_record_verified_by_a_webhook_signer_stands_when_the_gate_holds_the_hmac_seal() -> None:
    """The read door opened signer records without the gate's seal: a sealed HMAC verifier's key
    held no secret, and every record it verified was refused at every window."""
    from wakeful.authority.signer_seal import SignerSeal, sealed_record
    from wakeful.consumers.gate.memory_read import Vouched
    from wakeful.producers.signing import HmacSigner
    from wakeful.sdk.memory import Fact

    hook = HmacSigner("key-verifier", b"s" * 32)
    event = sign_event(hook, "account.verified", {"account": "DE89"}, task_id="t-1", event_id="ev-00000001")
    seal = SignerSeal.generate()
    doc: dict[str, object] = {"alg": "hmac-sha256", "material": base64.b64encode(hook.secret).decode()}
    doc |= {"principal": "verifier", "kinds": ["account.verified"], "tenant": "default"}
    registry = Registry({"key-verifier": orjson.dumps(sealed_record(doc, "key-verifier", seal))})
    fact = Fact(
        "remittance_account", verifiers=("principal:verifier",), keep=timedelta(days=30), high_impact=True
    )
    facts = {fact.name: fact}
    held = memory_seal.sealed(RING, record(event=event.encode().decode()))
    assert Vouched(registry, RING, facts, seal)(held) is None  # type: ignore[arg-type]
    refused = Vouched(registry, RING, facts)(held)  # type: ignore[arg-type]
    assert refused is not None and "does not verify" in refused
