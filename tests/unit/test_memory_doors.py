"""Memory's two doors as pure rules (workflow/memory.py), the relay's reading of what a change
carries (consumers/relay/memory_write.py), and the app's declarations (sdk/app.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakeful.consumers.relay import memory_write as relay_memory
from wakeful.core.errors import ConfigError
from wakeful.core.retry import FunctionsMissing
from wakeful.examples import onboarding_rules
from wakeful.examples.onboarding import app as onboarding
from wakeful.schemas.logs import OutboxRecord
from wakeful.schemas.memory import MemoryRecord, Status, evidence_ref
from wakeful.sdk import App, Fact, Recall, Remember
from wakeful.state.outbox import Pending
from wakeful.workflow import memory
from wakeful.workflow.memory import Writer

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
PAYEE = Fact("payee", high_impact=True, verifiers=("principal:verifier",), keep=timedelta(days=30))
LIKES = Fact("likes", verifiers=("principal:crm",), one=False)
FACTS = {f.name: f for f in (PAYEE, LIKES)}
VERIFIER = Writer("principal:verifier", "event:key-verifier:evt-00000001")
REQUESTER = Writer("principal:desk", "event:key-desk:evt-00000002")
LETTER = "remit to GB33BUKB20201555555555"


def admit(
    *wishes: Remember, writer: Writer = VERIFIER, evidence: dict[str, str] | None = None
) -> tuple[list[MemoryRecord], list[str]]:
    return memory.admitted(
        FACTS,
        wishes,
        writer=writer,
        tenant="default",
        task_id="t-1",
        state_version=3,
        evidence=evidence or {},
        now=NOW,
    )


@pytest.mark.parametrize(
    ("writer", "source", "fact", "status"),
    [
        (VERIFIER, "", "payee", Status.ACTIVE),  # the verifier's own event
        (VERIFIER, "document.letter", "payee", Status.QUARANTINED),  # high-impact: never from a document
        (REQUESTER, "", "payee", Status.QUARANTINED),  # not a verifier
        (REQUESTER, "document.letter", "payee", Status.QUARANTINED),
        (Writer("principal:crm", "event:key-crm:evt-00000003"), "document.letter", "likes", Status.ACTIVE),
        (REQUESTER, "", "likes", Status.QUARANTINED),
        (Writer("role:gate", "deadline"), "", "likes", Status.QUARANTINED),
    ],
)
def test_a_record_is_active_only_when_a_verifier_wrote_it_and_a_high_impact_one_never_from_a_document(
    writer: Writer, source: str, fact: str, status: Status
) -> None:
    (record,), refused = admit(
        Remember("supplier:acme", fact, "GB33", source=source),
        writer=writer,
        evidence={"document.letter": LETTER},
    )
    assert refused == [] and record.status is status and record.writer == writer.name
    assert record.verified_by == (writer.name if status is Status.ACTIVE else None)
    assert record.provenance == (evidence_ref(LETTER) if source else writer.source)
    assert record.expires_at == NOW + FACTS[fact].keep and record.history[0].status is status


@pytest.mark.parametrize(
    ("wish", "why"),
    [
        (Remember("supplier:acme", "iban", "x"), "declares no fact"),
        (Remember("Acme Inc", "payee", "x"), "is not <kind>:<id>"),
        (Remember("supplier:acme", "payee", " "), "an empty value"),
        (Remember("supplier:acme", "payee", "x" * 1001), "past the 1000"),
        (Remember("supplier:acme", "payee", "x", source="document.other"), "no evidence document"),
        (Remember("supplier:acme", "payee", "x", derived_from=("not-an-id",)), "derived_from"),
    ],
)
def test_a_candidate_that_does_not_fit_is_refused_with_its_reason_and_the_rest_are_kept(
    wish: Remember, why: str
) -> None:
    records, refused = admit(wish, Remember("supplier:acme", "payee", "DE89"))
    assert [r.value for r in records] == ["DE89"] and len(refused) == 1 and why in refused[0], refused


def test_a_change_keeps_at_most_its_candidates_limit_and_says_how_many_it_dropped() -> None:
    records, refused = admit(
        *(Remember("supplier:acme", "likes", f"v{i}") for i in range(memory.MAX_PER_CHANGE + 3))
    )
    assert len(records) == memory.MAX_PER_CHANGE and "3 candidates past" in refused[0]
    assert len({r.id for r in records}) == len(records)  # each its own id, the same on every replay
    assert [r.id for r in records] == [
        r.id for r in admit(*(Remember("supplier:acme", "likes", f"v{i}") for i in range(8)))[0]
    ]


def _stored(value: str, **change: object) -> MemoryRecord:
    (record,), _ = admit(Remember("supplier:acme", "payee", value))
    return record.model_copy(update=change)


def test_the_read_door_shows_only_active_unexpired_records_of_the_tenant_subject_and_facts_asked() -> None:
    ok = _stored("ok")
    hidden = [
        _stored("quarantined", status=Status.QUARANTINED, id="m-" + "1" * 24),
        _stored("revoked", status=Status.REVOKED, id="m-" + "2" * 24),
        _stored("expired", expires_at=NOW, id="m-" + "3" * 24),
        _stored("other tenant", tenant="acme", id="m-" + "4" * 24),
        _stored("other subject", subject="supplier:other", id="m-" + "5" * 24),
        _stored("other fact", fact="likes", id="m-" + "6" * 24),
    ]
    newer = [r.model_copy(update={"created_at": NOW + timedelta(seconds=1)}) for r in hidden]
    shown = memory.shown(
        [ok, *newer], tenant="default", subjects=["supplier:acme"], facts={"payee": PAYEE}, now=NOW
    )
    assert [r.value for r in shown] == ["ok"]


@given(st.lists(st.sampled_from(list(Status)), min_size=1, max_size=12))
def test_a_fact_kept_one_per_subject_shows_only_its_newest_active_record(statuses: list[Status]) -> None:
    records = [
        _stored(f"v{i}", id=f"m-{i:024x}", status=s, created_at=NOW - timedelta(hours=i))
        for i, s in enumerate(statuses)
    ]
    shown = memory.shown(
        records, tenant="default", subjects=["supplier:acme"], facts={"payee": PAYEE}, now=NOW
    )
    active = [r for r in records if r.status is Status.ACTIVE]
    assert [r.value for r in shown] == ([active[0].value] if active else [])


def _outbox(detail: dict[str, object], tenant: str = "default", task_id: str = "t-1") -> bytes:
    return OutboxRecord(
        record_id=f"{task_id}:3",
        task_id=task_id,
        state_version=3,
        message_id="ev:k:evt-00000001",
        stage="registering",
        task_version=1,
        at=NOW,
        detail=detail,
        tenant=tenant,
    ).encode()


def test_what_a_close_learned_is_written_quarantined_by_the_executor_whatever_it_claims() -> None:
    (taught,), _ = admit(
        Remember("supplier:acme", "payee", "DE89"), writer=Writer("role:executor", "op:LOOKUP:t-1:v1")
    )
    claimed = taught.model_copy(update={"status": Status.ACTIVE, "verified_by": "principal:verifier"})
    raw = claimed.model_dump(mode="json")
    assert relay_memory.learned(_outbox({"event": "x"})) == ([], [])  # nothing learned: not even decoded
    (found,), bad = relay_memory.learned(_outbox({"learned": [raw]}))
    assert bad == [] and (found.status, found.verified_by, found.writer) == (
        Status.QUARANTINED,
        None,
        "role:executor",
    )
    assert [c.status for c in found.history] == [Status.QUARANTINED]
    for forged in (_outbox({"learned": [raw]}, tenant="acme"), _outbox({"learned": [raw]}, task_id="t-2")):
        found_none, said = relay_memory.learned(forged)
        assert found_none == [] and "under another task or tenant" in said[0][1]
    posing = _stored("DE89").model_dump(mode="json")  # a verifier's record, on an executor's close
    none, said = relay_memory.learned(_outbox({"learned": [posing]}))
    assert none == [] and "the executor's, from a call" in said[0][1]
    none, said = relay_memory.learned(_outbox({"learned": [{**raw, "status": "trusted"}]}))
    assert none == [] and "memory 0" in said[0][1]
    none, said = relay_memory.learned(b'{"learned":[')
    assert none == [] and "outbox record unreadable" in said[0][1]


def test_an_app_names_every_problem_of_its_facts_and_recalls_at_once() -> None:
    wf = onboarding.workflows[0]
    import dataclasses

    bad = dataclasses.replace(wf, recall=Recall(("payee", "unknown"), lambda ctx: ()))
    with pytest.raises(ConfigError) as raised:
        App(
            "bad",
            workflows=[bad],
            tools=list(onboarding.tools),
            facts=[
                Fact("payee"),
                Fact("payee"),
                Fact("Bad Name"),
                Fact("x", verifiers=("verifier",)),
                Fact("y", keep=timedelta(0)),
            ],
        )
    said = str(raised.value)
    for part in (
        "two facts are named 'payee'",
        "fact 'Bad Name' must match",
        "verifier 'verifier'",
        "fact y needs a positive keep",
        "recalls fact 'unknown'",
    ):
        assert part in said, said


def test_the_onboarding_remembers_a_documents_account_quarantined_and_names_one_subject_per_supplier() -> (
    None
):
    assert onboarding_rules.accounts_named(
        f"{LETTER} or GB00BUKB20201555555555, again GB33BUKB20201555555555"
    ) == ["GB33BUKB20201555555555"]  # an IBAN whose checksum fails is no account; each once
    assert (
        onboarding_rules.subject("Acme Tools GmbH")
        == onboarding_rules.subject("ACME tools  gmbh")
        == "supplier:acme-tools-gmbh"
    )
    assert memory.subject_ok(onboarding_rules.subject("株式会社"))
    assert orjson.loads(orjson.dumps(onboarding.fact_table["remittance_account"].verifiers)) == [
        "principal:verifier"
    ]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(list(Status)),
            st.integers(-3, 3),  # hours from now it expires
            st.integers(0, 5),  # hours ago it was written
            st.sampled_from(["payee", "likes"]),
            st.sampled_from(["supplier:acme", "supplier:other"]),
            st.sampled_from(["", "writer", "subject", "naive", "when"]),  # how it was forged, if it was
        ),
        max_size=20,
    )
)
def test_the_read_door_over_stored_json_shows_what_it_shows_over_decoded_records(
    rows: list[tuple[Status, int, int, str, str, str]],
) -> None:
    records, docs = [], []
    for n, (status, expires, age, fact, subject, broken) in enumerate(rows):
        record = _stored(
            f"v{n}",
            id=f"m-{n:024x}",
            status=status,
            fact=fact,
            subject=subject,
            expires_at=NOW + timedelta(hours=expires),
            created_at=NOW - timedelta(hours=age),
        )
        doc = orjson.loads(record.encode())
        forged = {
            "writer": {"writer": "the model"},  # no writer a record may name: never decoded, never shown
            "subject": {"subject": ["supplier:acme"]},
            "naive": {"expires_at": "2099-01-01T00:00:00"},
            "when": {"created_at": 17},
        }.get(broken)
        if forged:
            doc.update(forged)
        else:
            records.append(record)
        docs.append(doc)
    where = {"tenant": "default", "subjects": ["supplier:acme"], "facts": FACTS, "now": NOW}
    assert memory.shown_from(docs, **where) == memory.shown(records, **where)  # type: ignore[arg-type]


class _Missing:
    """A store whose write door finds its function library gone (a fake: pure logic only)."""

    def candidates(self, task_ids: list[str]) -> dict[str, list[tuple[bytes, bytes]]]:
        return {t: [(b"1-0", _stored("DE89").encode())] for t in task_ids}

    def refuse(self, refusals: object) -> None:
        pass

    def put(self, records: object, now: object) -> None:
        raise FunctionsMissing("wakeful_v3", "Redis has no function wakeful_v3_memory_put")

    def consumed(self, entries: object) -> None:
        raise AssertionError("nothing is taken off the stream when nothing was written")


def test_the_relay_holds_a_tasks_memory_back_when_the_write_door_is_not_loaded() -> None:
    marked = [_outbox({"event": "x", "memory": ["m-" + "0" * 24]})]
    gate = Pending("t-1", [b"1-0"], ["t-1:3"], marked, marked)
    plain = [_outbox({"event": "x"}, task_id="t-2")]
    other = Pending("t-2", [b"1-0"], ["t-2:3"], plain, plain)
    said: list[str] = []
    held, written = relay_memory.apply(_Missing(), [gate, other], lambda event, **_: said.append(event))  # type: ignore[arg-type]
    assert (held, written) == ({"t-1"}, 0) and said == ["relay.memory_held"]


def test_a_verifier_event_as_large_as_the_door_accepts_still_makes_an_active_record_the_store_takes() -> None:
    """A record carried at most 6000 characters of its verifier's event and 8192 bytes in all: a
    verifier whose event carried a document lost its verified record to a refusal."""
    from wakeful.producers.signing import Ed25519Signer, sign_event
    from wakeful.schemas.events import MAX_EVENT_BYTES
    from wakeful.state import keys

    signer = Ed25519Signer.from_seed("key-verifier", b"\x01" * 32)
    text = 'a "quoted" line\\n' * 2000
    event = sign_event(signer, "payee.verified", {"doc": text}, task_id="t-1", event_id="evt-00000001")
    raw = event.encode().decode()
    assert 20_000 < len(raw) <= MAX_EVENT_BYTES
    writer = Writer("principal:verifier", "event:key-verifier:evt-00000001", raw)
    records, refused = admit(Remember("supplier:acme", "payee", "DE89"), writer=writer)
    assert refused == [] and records[0].status == Status.ACTIVE and records[0].event == raw
    assert len(records[0].encode()) <= keys.MEMORY_RECORD_BYTES
