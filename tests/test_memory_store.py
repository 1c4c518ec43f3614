"""The memory store and the evidence documents on a real Redis, through each role's own credential:
the write door writes a record once, refuses past a subject's limit and a record's size with a
reason on the tenant's refused stream, and makes room by dropping what expired or was revoked; the
read door reads only what is filed where it says; a status moves only from the statuses named; and
no role but the relay (the door) and the admin writes memory."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import redis

from wakeful.core.settings import Settings
from wakeful.schemas.memory import Change, MemoryRecord, Status
from wakeful.state import acl, evidence, keys, upgrades
from wakeful.state.memory import MemoryStore

NOW = datetime.now(UTC)
pytestmark = pytest.mark.timeout(60)


def record(n: int, subject: str, *, tenant: str = "default", **change: object) -> MemoryRecord:
    base = MemoryRecord(
        id=f"m-{n:024x}",
        tenant=tenant,
        subject=subject,
        fact="likes",
        value=f"value {n}",
        writer="principal:crm",
        provenance="event:key-crm:evt-00000001",
        task_id="t-1",
        status=Status.QUARANTINED,
        created_at=NOW,
        expires_at=NOW + timedelta(days=1),
        history=(Change(status=Status.QUARANTINED, by="write door", reason="new", at=NOW),),
    )
    return base.model_copy(update=change)


def subject() -> str:
    return f"customer:c-{uuid.uuid4().hex[:10]}"


def test_the_write_door_writes_once_and_refuses_past_a_subjects_limit_with_a_reason(
    settings: Settings,
) -> None:
    door, who = MemoryStore(acl.connect(settings, "relay")), subject()
    first = [record(n, who) for n in range(keys.MEMORY_PER_SUBJECT)]
    assert door.put(first, NOW).written == keys.MEMORY_PER_SUBJECT
    assert door.put(first[:3], NOW).written == 0  # a replay writes nothing again
    past = door.put([record(999, who)], NOW)
    assert past.written == 0 and "holds its 64 records" in past.refused[0][1]
    refused = acl.connect(settings, "admin").xrevrange(keys.memory_refused("default"), count=1)
    assert refused[0][1][b"id"] == record(999, who).id.encode()  # type: ignore[index]
    big = record(1000, subject(), value="x" * 1000, derived_from=tuple(f"m-{n:024x}" for n in range(16)))
    huge = big.model_copy(update={"history": big.history * 60, "event": "e" * keys.MEMORY_RECORD_BYTES})
    assert f"bytes, past the {keys.MEMORY_RECORD_BYTES}" in door.put([huge], NOW).refused[0][1]


def test_the_write_door_makes_room_by_dropping_expired_and_revoked_records(settings: Settings) -> None:
    door, admin, who = MemoryStore(acl.connect(settings, "relay")), acl.connect(settings, "admin"), subject()
    stale = [record(0, who, expires_at=NOW - timedelta(seconds=1)), record(1, who, status=Status.REVOKED)]
    rest = [record(n, who) for n in range(2, keys.MEMORY_PER_SUBJECT)]
    assert door.put([*stale, *rest], NOW).written == keys.MEMORY_PER_SUBJECT
    assert door.put([record(500, who)], NOW).written == 1
    held = {r.id for r in MemoryStore(admin).recall("default", [who])}
    assert record(500, who).id in held and not held & {r.id for r in stale}


def test_the_read_door_reads_only_records_filed_under_their_own_tenant_and_subject(
    settings: Settings,
) -> None:
    admin, who = acl.connect(settings, "admin"), subject()
    misfiled = record(7, "customer:someone-else")
    admin.hset(keys.memory("default", who), misfiled.id, misfiled.encode())
    admin.hset(keys.memory("default", who), "m-" + "9" * 24, b"\xff not a record")
    other = record(8, who, tenant="acme")
    admin.hset(keys.memory("default", who), other.id, other.encode())
    MemoryStore(acl.connect(settings, "relay")).put([record(9, who)], NOW)
    found = MemoryStore(acl.connect(settings, "gate")).recall("default", [who])
    assert [r.id for r in found] == [record(9, who).id]


def test_a_status_moves_only_from_the_statuses_its_command_names(settings: Settings) -> None:
    admin, who = MemoryStore(acl.connect(settings, "admin")), subject()
    admin.put([record(1, who)], NOW)
    revoked = admin.set_status(record(1, who), Status.REVOKED, "ops-lead", "planted", NOW)
    assert revoked is not None and revoked.status is Status.REVOKED
    # a release that read the record before the revoke landed finds it moved, and changes nothing
    late = admin.set_status(
        record(1, who), Status.ACTIVE, "crm", "released", NOW, only_from=frozenset({Status.QUARANTINED})
    )
    assert late is None
    (kept,) = admin.recall("default", [who])
    assert kept.status is Status.REVOKED and [c.status for c in kept.history] == [
        Status.QUARANTINED,
        Status.REVOKED,
    ]


@pytest.mark.parametrize("role", ["gate", "executor", "proposer", "inbound", "timer", "ingress"])
def test_no_role_but_the_door_writes_memory(settings: Settings, role: str) -> None:
    client, who = acl.connect(settings, role), subject()
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.hset(keys.memory("default", who), "m-" + "1" * 24, record(1, who).encode())
    if role != "gate":  # the gate reads a subject's records for the window; nobody else does
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.hgetall(keys.memory("default", who))


def test_a_document_is_stored_once_and_forgotten_with_every_excerpt_of_it(settings: Settings) -> None:
    gate, admin = acl.connect(settings, "gate"), acl.connect(settings, "admin")
    text = f"a supplier letter {uuid.uuid4().hex}"
    tasks = [f"t-{uuid.uuid4().hex[:10]}" for _ in range(2)]
    for task_id in tasks:
        ahead, inside = evidence.writes("default", task_id, {"letter": text}, "event:k:evt-00000001", NOW)
        pipe = gate.pipeline(transaction=False)
        for command in [*ahead, *inside]:
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]
        pipe.execute()
    ref = evidence.ref_of(text)
    documents = evidence.Evidence(admin)
    assert documents.tenants(ref) == ["default"] and documents.citing("default", ref) == sorted(tasks)
    ttl = admin.ttl(keys.evidence_doc("default", evidence.digest_of(ref)))
    assert 0 < int(ttl) <= keys.EVIDENCE_TTL_S
    gone = documents.forget("default", ref)
    assert gone.document and sorted(t for t, _ in gone.excerpts) == sorted(tasks)
    assert documents.fetch("default", ref) is None
    assert all(not admin.hgetall(keys.evidence(t)) for t in tasks)


def test_evidence_kept_whole_before_references_is_moved_into_a_document_and_a_reference(
    settings: Settings,
) -> None:
    admin = acl.connect(settings, "admin")
    task_id, text = f"t-{uuid.uuid4().hex[:10]}", f"an old note kept whole {uuid.uuid4().hex}"
    admin.hset(keys.evidence(task_id), f"evidence:{task_id}:note", text)
    said = upgrades.run(admin)
    assert any("evidence documents kept in their tasks" in line for line in said), said
    stored: dict[bytes, bytes] = admin.hgetall(keys.evidence(task_id))  # type: ignore[assignment]
    kept = evidence.held(stored[f"evidence:{task_id}:note".encode()].decode())
    assert kept["ref"] == evidence.ref_of(text) and kept["excerpt"] == text
    document = evidence.Evidence(admin).fetch("default", evidence.ref_of(text))
    assert document is not None and document["text"] == text and document["source"] == "upgrade"
    assert not any("evidence" in line for line in upgrades.run(admin))  # a second run finds nothing


def test_a_forgotten_record_is_never_written_again_by_a_late_replay(settings: Settings) -> None:
    door, admin, who = (
        MemoryStore(acl.connect(settings, "relay")),
        MemoryStore(acl.connect(settings, "admin")),
        subject(),
    )
    assert door.put([record(1, who)], NOW).written == 1
    assert admin.delete([record(1, who)]) == 1
    late = door.put([record(1, who)], NOW)
    assert late.written == 0 and "forgotten or dropped" in late.refused[0][1]
    taken = door.put([record(2, who)], NOW)
    other = door.put([record(2, who, task_id="t-other")], NOW)  # another record under a taken id
    assert taken.written == 1 and "another record holds its id" in other.refused[0][1]


def test_a_flood_of_quarantined_records_never_keeps_a_verified_one_out(settings: Settings) -> None:
    door, who = MemoryStore(acl.connect(settings, "relay")), subject()
    flood = [
        record(n, who, created_at=NOW - timedelta(minutes=100 - n)) for n in range(keys.MEMORY_PER_SUBJECT)
    ]
    assert door.put(flood, NOW).written == keys.MEMORY_PER_SUBJECT
    assert "holds its 64 records" in door.put([record(900, who)], NOW).refused[0][1]  # another quarantined
    verified = record(
        901, who, status=Status.ACTIVE, writer="principal:verifier", verified_by="principal:verifier"
    )
    assert door.put([verified], NOW).written == 1
    held = {r.id for r in MemoryStore(acl.connect(settings, "admin")).recall("default", [who])}
    assert verified.id in held and flood[0].id not in held  # the oldest quarantined one made room


@pytest.mark.parametrize("role", ["executor", "proposer", "inbound", "timer", "relay", "ingress"])
def test_only_the_gate_adds_to_a_tasks_memory_stream(settings: Settings, role: str) -> None:
    with pytest.raises(redis.exceptions.NoPermissionError):
        acl.connect(settings, role).xadd(keys.task_memory("t-1"), {"r": record(1, subject()).encode()})
