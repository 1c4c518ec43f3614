"""Memory records planted outside the write door, on a real Redis with each role's own login: the
relay's login cannot HSET a subject's records hash (its door adds a record with HSETNX, D93), and a
record planted with a login that can (the admin's, as any role that had the right before) never
passes the read door: it carries no seal the keyring makes, so the real verified record of its
fact is shown in its place, and the refusal names why."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import redis

from wakeful.consumers.gate.memory_read import Vouched
from wakeful.core.settings import Settings
from wakeful.schemas.memory import Change, MemoryRecord, Status
from wakeful.sdk.memory import Fact
from wakeful.state import acl, keys, memory_seal
from wakeful.state.memory import MemoryStore
from wakeful.state.seal import Keyring
from wakeful.workflow import memory

NOW = datetime.now(UTC)
FACTS = {"likes": Fact("likes", verifiers=("principal:crm",), keep=timedelta(days=1), one=True)}
pytestmark = pytest.mark.timeout(60)


def verified(subject: str, n: int, value: str, at: datetime) -> MemoryRecord:
    return MemoryRecord(
        id=f"m-{n:024x}",
        tenant="default",
        subject=subject,
        fact="likes",
        value=value,
        writer="principal:crm",
        provenance=f"event:key-crm:evt-{n:08d}",
        task_id="t-1",
        status=Status.ACTIVE,
        verified_by="principal:crm",
        created_at=at,
        expires_at=at + timedelta(days=1),
        history=(Change(status=Status.ACTIVE, by="write door", reason="written by verifier", at=at),),
    )


def window(settings: Settings, subject: str) -> tuple[list[str], list[str]]:
    """(the values the gate's read door shows for `subject`, why it refused any), read as the gate."""
    gate = acl.connect(settings, "gate")
    refused: list[tuple[MemoryRecord, str]] = []
    docs = MemoryStore(gate).recall_docs("default", [subject])
    check = Vouched(gate, Keyring.load(settings.keyring), dict(FACTS))
    shown = memory.shown_from(
        docs, tenant="default", subjects=[subject], facts=FACTS, now=NOW, check=check, refused=refused
    )
    return [r.value for r in shown], [why for _, why in refused]


def test_the_relays_login_cannot_hset_a_subjects_records(settings: Settings) -> None:
    subject = f"customer:c-{uuid.uuid4().hex[:10]}"
    forged = verified(subject, 1, "planted", NOW)
    relay = acl.connect(settings, "relay")
    with pytest.raises(redis.exceptions.NoPermissionError):
        relay.hset(keys.memory("default", subject), forged.id, forged.encode())
    assert acl.connect(settings, "admin").hlen(keys.memory("default", subject)) == 0


def test_a_record_planted_outside_the_write_door_is_never_shown_in_place_of_the_verified_one(
    settings: Settings,
) -> None:
    subject = f"customer:c-{uuid.uuid4().hex[:10]}"
    ring = Keyring.load(settings.keyring)
    real = memory_seal.sealed(ring, verified(subject, 1, "real", NOW))
    assert MemoryStore(acl.connect(settings, "relay")).put([real], NOW).written == 1
    assert window(settings, subject) == (["real"], [])

    # Newer than the real one, of a fact kept one per subject: shown in its place if it passed.
    later = NOW + timedelta(seconds=1)
    unsealed = verified(subject, 2, "planted", later)
    copied_seal = verified(subject, 3, "planted too", later).model_copy(update={"seal": real.seal})
    admin = acl.connect(settings, "admin")
    admin.hset(keys.memory("default", subject), unsealed.id, unsealed.encode())
    admin.hset(keys.memory("default", subject), copied_seal.id, copied_seal.encode())
    # and a quarantined record written through the door, flipped to active in place, its seal kept
    held = verified(subject, 4, "flipped", later).model_copy(update={"status": Status.QUARANTINED})
    flipped = memory_seal.sealed(ring, held)
    assert MemoryStore(acl.connect(settings, "relay")).put([flipped], NOW).written == 1
    admin.hset(
        keys.memory("default", subject),
        flipped.id,
        flipped.model_copy(update={"status": Status.ACTIVE}).encode(),
    )

    values, refusals = window(settings, subject)
    assert values == ["real"]
    assert sorted(refusals) == sorted(
        [
            memory_seal.UNSEALED,
            "its seal does not verify: the record was changed or written outside the write door",
            "its seal does not verify: the record was changed or written outside the write door",
        ]
    )
