"""`wakeful memory` on the real stack, as an operator runs it: docs/memory.md's commands as written,
on the records its walk-through names, then the rules one at a time. A release never makes a
high-impact record active nor lets anyone but a verifier release; a quarantine by writer moves
only that writer's active records; forgetting a source deletes what came from it and what was
derived from that, transitively, and nothing else. Statuses are read back from Redis."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from cli_run import doc, wakeful
from helpers import BankClient
from memory_app import LANGUAGE, LEAD
from memory_doc import PLANTED, SUBJECT, WINDOW, memory_commands, shown

from wakeful.core.ids import DEFAULT_TENANT
from wakeful.examples.onboarding import REMITTANCE, VERIFIER
from wakeful.examples.onboarding_story import PLANTED as LETTER
from wakeful.examples.onboarding_story import PLANTED_ACCOUNT, VERIFIED_ACCOUNT
from wakeful.schemas.memory import Change, MemoryRecord, Status, evidence_ref
from wakeful.state import evidence, keys
from wakeful.state.evidence import Evidence
from wakeful.state.memory import MemoryStore

pytestmark = pytest.mark.timeout(240)

OPERATOR = "ops-lead"  # a dev signer that may send task.reopen (`authority init`)
APP = "memory_app:app"
START = datetime.fromisoformat(WINDOW[0])
# The walk-through's records besides the planted one: the verified account (before the window),
# one derived from the planted one, one written in the window, one at its end (outside it).
VERIFIED, DERIVED = "m-5d1c0e7a9b3f4a2c8e6d1f07", "m-1e2d3c4b5a69788796a5b4c3"
IN_WINDOW, AT_END = "m-7b6a59483726150f4e3d2c1b", "m-0f1e2d3c4b5a69788796a5b4"
WALK = (PLANTED, VERIFIED, DERIVED, IN_WINDOW, AT_END)


def made(rid: str | None = None, *, at: datetime | None = None, **fields: object) -> MemoryRecord:
    at = at or datetime.now(UTC)
    status = Status(str(fields.pop("status", Status.ACTIVE)))
    base: dict[str, object] = {
        "id": rid or f"m-{uuid.uuid4().hex[:24]}",
        "tenant": DEFAULT_TENANT,
        "subject": SUBJECT,
        "fact": REMITTANCE,
        "value": VERIFIED_ACCOUNT,
        "writer": VERIFIER,
        "provenance": "deadline",
        "task_id": "t-memory-cli",
        "status": status,
        "created_at": at,
        "expires_at": at + timedelta(days=730),
        "history": (Change(status=status, by="write door", reason="written", at=at),),
    }
    return MemoryRecord.model_validate(base | fields)


@pytest.fixture()
def store(client: BankClient) -> MemoryStore:
    return MemoryStore(client.admin)


def found(store: MemoryStore, rid: str) -> MemoryRecord:
    record = next((r for r in store.every() if r.id == rid), None)
    assert record is not None, f"{rid} is gone"
    return record


def gone(store: MemoryStore, *rids: str) -> bool:
    return not {r.id for r in store.every()} & set(rids)


def doc_list(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = orjson.loads(result.stdout)
    return listed


def put(store: MemoryStore, *records: MemoryRecord) -> list[MemoryRecord]:
    assert store.put(records, datetime.now(UTC)).written == len(records)
    return list(records)


@pytest.fixture()
def written(store: MemoryStore) -> Iterator[list[MemoryRecord]]:
    """Records a test writes (each of a tenant of its own), deleted after it."""
    records: list[MemoryRecord] = []
    yield records
    store.delete(records)


@pytest.fixture()
def walk_through(store: MemoryStore) -> Iterator[None]:
    """The page's records, written afresh: what an earlier run left is deleted first, and the ids
    it forgot are cleared from their subjects' gone sets (else the door refuses them again)."""
    store.delete(r for r in store.every() if r.id in WALK or r.subject == SUBJECT)
    for subject in (SUBJECT, "customer:c-1", "customer:c-2"):
        store.client.delete(keys.memory_gone(DEFAULT_TENANT, subject))
    letter = evidence_ref(LETTER)
    put(
        store,
        made(VERIFIED, at=START - timedelta(minutes=20), provenance="event:key-verifier:ev-acme-verified",
             verified_by=VERIFIER),
        made(PLANTED, at=START + timedelta(minutes=5), status=Status.QUARANTINED, value=PLANTED_ACCOUNT,
             writer="principal:svc-refunds", provenance=letter),
        made(DERIVED, at=START + timedelta(minutes=6), status=Status.QUARANTINED, value=PLANTED_ACCOUNT,
             writer="principal:svc-refunds", provenance="deadline", derived_from=(PLANTED,)),
        made(IN_WINDOW, at=START + timedelta(minutes=30), subject="customer:c-1", fact=LANGUAGE, value="de",
             writer=LEAD, verified_by=LEAD),
        made(AT_END, at=START + timedelta(hours=1), subject="customer:c-2", fact=LANGUAGE, value="fr",
             writer=LEAD, verified_by=LEAD),
    )  # fmt: skip
    yield
    store.delete(r for r in store.every() if r.id in WALK)


def test_every_command_docs_memory_shows_does_what_the_page_says(
    store: MemoryStore, walk_through: None
) -> None:
    ran: list[list[str]] = []

    def run(argv: list[str], *extra: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        result = wakeful(*argv, *extra)
        assert result.returncode == code, (argv, result.stdout, result.stderr)
        ran.append(argv)
        return result

    def ours(ids: list[str]) -> list[str]:  # a shared Redis may hold other tests' records too
        return [i for i in ids if i in WALK]

    by_subject, by_status = shown("list")
    listed = run(by_subject).stdout.splitlines()
    assert [line.split()[0] for line in listed] == [DERIVED, PLANTED, VERIFIED], "newest first"
    assert PLANTED_ACCOUNT in listed[1] and "quarantined" in listed[1] and evidence_ref(LETTER) in listed[1]
    quarantined = doc_list(run(by_status))
    assert ours([r["id"] for r in quarantined]) == [DERIVED, PLANTED]
    assert all(r["status"] == "quarantined" and r["fact"] == REMITTANCE for r in quarantined)

    [show] = shown("show")
    whole = run(show).stdout
    assert PLANTED_ACCOUNT in whole and "history:" in whole and "write door" in whole

    [release] = shown("release")
    refused = " ".join(run(release, code=1).stderr.split())
    assert "becomes active only through a verification event signed by one of principal:verifier" in refused
    assert "never by a release" in refused
    assert found(store, PLANTED).status is Status.QUARANTINED

    by_writer, by_window = shown("quarantine")
    assert VERIFIED in doc(run(by_writer, "--json"))["quarantined"]
    moved = found(store, VERIFIED)
    assert moved.status is Status.QUARANTINED
    assert (moved.history[-1].by, moved.history[-1].reason) == (
        OPERATOR,
        by_writer[by_writer.index("--reason") + 1],
    )
    assert ours(doc(run(by_window, "--json"))["quarantined"]) == [IN_WINDOW], "[since, until): the end is out"
    assert found(store, AT_END).status is Status.ACTIVE

    [revoke] = shown("revoke")
    run(revoke)
    assert found(store, PLANTED).status is Status.REVOKED

    dry, forget = shown("forget")
    source = forget[forget.index("--lineage") + 1]
    documents = Evidence(store.client)
    holding = documents.tenants(source)  # the demo's letter, where a demo ran on this stack
    would = doc(run(dry, "--json"))
    assert ours(would["deleted"]["memory"]) == sorted([DERIVED, PLANTED])
    assert [d["tenant"] for d in would["deleted"]["evidence"]] == holding
    assert found(store, PLANTED).status is Status.REVOKED, "a dry run deleted"
    assert documents.tenants(source) == holding, "a dry run deleted a document"
    assert ours(doc(run(forget, "--json"))["deleted"]["memory"]) == sorted([DERIVED, PLANTED])
    assert documents.tenants(source) == [], "the document stays nowhere"
    assert {r.id for r in store.every()} & set(WALK) == {VERIFIED, IN_WINDOW, AT_END}

    [read] = shown("document")
    assert wakeful(*read).returncode == 1  # forgotten just now: nothing to read
    ahead, _ = evidence.writes(
        DEFAULT_TENANT, "t-page", {"letter": LETTER}, "event:key-svc-refunds:ev-page", START
    )
    for command in ahead:
        store.client.execute_command(*command)  # type: ignore[no-untyped-call]
    again = doc(run(read))
    assert (again["text"], again["source"], again["tenant"]) == (
        LETTER,
        "event:key-svc-refunds:ev-page",
        "default",
    )
    assert ran == memory_commands(), "every `wakeful memory` command on the page was run, in page order"


def test_a_release_never_activates_a_high_impact_record_nor_lets_anyone_but_a_verifier_release(
    store: MemoryStore, written: list[MemoryRecord], unique: str
) -> None:
    tenant, quarantined = f"t-{unique}", Status.QUARANTINED
    high, language, unknown = written[:] = put(
        store,
        made(tenant=tenant, status=quarantined, writer="principal:svc-refunds", value=PLANTED_ACCOUNT),
        made(tenant=tenant, status=quarantined, subject="customer:c-1", fact=LANGUAGE, value="de",
             writer="principal:svc-refunds"),
        made(tenant=tenant, status=quarantined, subject="customer:c-1", fact="shoe_size", value="44"),
    )  # fmt: skip

    def release(rid: str, by: str) -> subprocess.CompletedProcess[str]:
        return wakeful("memory", "release", rid, "--by", by, "--app", APP, "--json")

    said = release(high.id, "verifier")
    assert said.returncode == 1 and "never by a release" in said.stderr, said.stderr
    assert found(store, high.id) == high, "a refused release changed the record"
    said = release(language.id, "mallory")
    assert said.returncode == 1 and f"only {LEAD} may release it" in said.stderr, said.stderr
    assert found(store, language.id) == language
    said = release(unknown.id, "support-lead")
    assert said.returncode == 1 and "declares no fact 'shoe_size'" in said.stderr, said.stderr
    said = release(f"m-{uuid.uuid4().hex[:24]}", "support-lead")
    assert said.returncode == 1 and "no memory record" in said.stderr, said.stderr

    released = release(language.id, "support-lead")
    assert released.returncode == 0, released.stderr
    now = found(store, language.id)
    assert now.status is Status.ACTIVE and now.verified_by is None and doc(released)["status"] == "active"
    last = now.history[-1]
    assert (last.status, last.by, last.reason) == (Status.ACTIVE, LEAD, f"released by {LEAD}")
    again = release(language.id, "support-lead")
    assert again.returncode == 1 and "only a quarantined record is released" in again.stderr


def test_a_quarantine_by_writer_moves_only_that_writers_active_records(
    store: MemoryStore, written: list[MemoryRecord], unique: str
) -> None:
    writer, other = f"principal:w-{unique}", f"principal:o-{unique}"
    mine, also_mine, held, revoked, theirs = written[:] = put(
        store,
        made(tenant=f"a-{unique}", writer=writer),
        made(tenant=f"b-{unique}", writer=writer, subject="customer:c-1", fact=LANGUAGE, value="de"),
        made(tenant=f"a-{unique}", writer=writer, status=Status.QUARANTINED),
        made(tenant=f"a-{unique}", writer=writer, status=Status.REVOKED),
        made(tenant=f"a-{unique}", writer=other),
    )
    quarantine = ("memory", "quarantine", "--writer", writer, "--reason", "key leaked")
    refused = wakeful(*quarantine, "--by", "mallory")
    assert refused.returncode == 2 and "'mallory' is not an operator" in refused.stderr, refused.stderr
    both = wakeful(*quarantine, "--since", WINDOW[0], "--until", WINDOW[1], "--by", OPERATOR)
    assert both.returncode == 2 and "exactly one" in both.stderr, both.stderr
    assert [found(store, r.id) for r in written] == written, "a refused quarantine changed a record"

    done = wakeful(*quarantine, "--by", OPERATOR, "--json")
    assert done.returncode == 0, done.stderr
    assert doc(done)["quarantined"] == sorted([mine.id, also_mine.id])
    for record in (mine, also_mine):
        now = found(store, record.id)
        assert now.status is Status.QUARANTINED
        assert (now.history[-1].by, now.history[-1].reason) == (OPERATOR, "key leaked")
    assert found(store, held.id) == held and found(store, revoked.id) == revoked, "not active: left as it was"
    assert found(store, theirs.id) == theirs, "another writer's record moved"


def test_forget_by_lineage_deletes_what_came_from_the_source_transitively_and_nothing_else(
    store: MemoryStore, written: list[MemoryRecord], unique: str
) -> None:
    tenant, source = f"t-{unique}", evidence_ref(f"a supplier letter {unique}")
    read = made(tenant=tenant, status=Status.QUARANTINED, provenance=source)
    copied = made(tenant=tenant, subject="customer:c-1", derived_from=(read.id,))
    copied_again = made(tenant=tenant, subject="customer:c-2", derived_from=(copied.id,))
    kept = made(tenant=tenant, provenance=f"event:key-verifier:ev-{unique}")
    kept_copy = made(tenant=tenant, subject="customer:c-1", derived_from=(kept.id,))
    written[:] = put(store, read, copied, copied_again, kept, kept_copy)
    lineage = sorted([read.id, copied.id, copied_again.id])

    bad = wakeful("memory", "forget", "--lineage", "sha256:nonsense", "--by", OPERATOR)
    assert bad.returncode == 2 and "names no source" in bad.stderr, bad.stderr
    dry = wakeful("memory", "forget", "--lineage", source, "--by", OPERATOR, "--dry-run", "--json")
    assert dry.returncode == 0 and doc(dry)["deleted"] == {"memory": lineage, "evidence": []}, dry.stdout
    assert [found(store, r.id) for r in written] == written, "a dry run deleted"

    forgot = wakeful("memory", "forget", "--lineage", source, "--by", OPERATOR, "--json")
    assert forgot.returncode == 0 and doc(forgot)["deleted"]["memory"] == lineage, forgot.stdout
    assert gone(store, *lineage)
    assert found(store, kept.id) == kept and found(store, kept_copy.id) == kept_copy

    by_record = wakeful("memory", "forget", "--lineage", kept.id, "--by", OPERATOR, "--json")
    assert doc(by_record)["deleted"]["memory"] == sorted([kept.id, kept_copy.id]), by_record.stdout
    assert gone(store, kept.id, kept_copy.id)


def test_revoke_takes_any_status_and_only_from_an_operator(
    store: MemoryStore, written: list[MemoryRecord], unique: str
) -> None:
    active, quarantined = written[:] = put(
        store, made(tenant=f"t-{unique}"), made(tenant=f"t-{unique}", status=Status.QUARANTINED)
    )
    why = ("--reason", "wrong supplier")
    refused = wakeful("memory", "revoke", active.id, *why, "--by", "mallory")
    assert refused.returncode == 2 and found(store, active.id) == active, refused.stderr
    for record in (active, quarantined):
        done = wakeful(
            "memory", "revoke", record.id, "--reason", "wrong supplier", "--by", OPERATOR, "--json"
        )
        assert done.returncode == 0 and doc(done)["status"] == "revoked", done.stderr
        now = found(store, record.id)
        assert now.status is Status.REVOKED and now.history[-1].reason == "wrong supplier"
    missing = wakeful("memory", "show", f"m-{uuid.uuid4().hex[:24]}")
    assert missing.returncode == 1 and "no memory record" in missing.stderr, missing.stderr
