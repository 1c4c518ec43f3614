"""An effect's chain of custody, checked offline (operate/audit/chain.py, D72): one good chain,
then one broken link per case, each named by the record and message where it breaks."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from wakeful.core import topics
from wakeful.core.log_signing import LogSigner
from wakeful.operate.audit.chain import Audit, audit
from wakeful.operate.audit.file import (
    Logged,
    PublicKeys,
    Signer,
    keys_doc,
    message_line,
    read_keys,
    read_messages,
)
from wakeful.producers.signing import Ed25519Signer, HmacSigner, sign_event
from wakeful.schemas import events
from wakeful.schemas.changelog import action_record
from wakeful.schemas.custody import ApprovalBound, ProposalTrail
from wakeful.schemas.logs import LOG_BATCH_HEAD, LOG_BATCH_TAIL, ActionLogEntry, ActionStatus, OutboxRecord
from wakeful.schemas.redrive import LogWatermark
from wakeful.schemas.signatures import VerifyKey

pytestmark = pytest.mark.timeout(30)

T = "t-audit"
OP = f"REFUND:{T}:v1"
AT = datetime(2026, 12, 1, 12, tzinfo=UTC)
LOG_KEY = LogSigner("log-1", Ed25519PrivateKey.from_private_bytes(b"\x01" * 32))
REQUESTER = Ed25519Signer.from_seed("req-key", b"\x02" * 32)
ALICE = Ed25519Signer.from_seed("alice-key", b"\x03" * 32)
MALLORY = Ed25519Signer.from_seed("alice-key", b"\x04" * 32)  # claims alice's key id


def _public(signer: Ed25519Signer) -> bytes:
    return signer.private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


KEYS = PublicKeys(
    {LOG_KEY.key_id: LOG_KEY.public()},
    {
        "req-key": Signer("req-key", "ed25519", _public(REQUESTER), "requester", "default"),
        "alice-key": Signer("alice-key", "ed25519", _public(ALICE), "alice", "default"),
    },
)


@dataclass
class Chain:
    """The parts of a refund task's chain: create, approval, intent, outcome, close."""

    approver: Ed25519Signer | HmacSigner = ALICE
    bound_version: int = 1
    drop_version: int | None = None
    extra_action: str | None = None
    settled: bool = False  # the close carries no proposal (settled by its key after a crash)
    edit: Callable[[bytes], bytes] | None = None
    messages: list[Logged] = field(default_factory=list)

    def build(self) -> list[Logged]:
        first, second = self.records()
        return [_message(first, 10), _message(second, 11, self.edit)]

    def records(self) -> tuple[list[bytes], list[bytes]]:
        """The records of the chain's two messages: the gate's two changes, then the effect's."""
        create = sign_event(
            REQUESTER, events.CREATE, {"amount": 2500}, task_id=T, event_id="ev-create-1", issued_at=AT
        )
        approve = sign_event(
            self.approver,
            events.APPROVE,
            {"version": self.bound_version},
            task_id=T,
            event_id="ev-approve-2",
            issued_at=AT,
        )
        bound = ApprovalBound(
            version=self.bound_version, digest="d" * 64, approver="alice", scope="refund.execute"
        )
        intent = ActionLogEntry(
            op_key=OP,
            task_id=T,
            status=ActionStatus.IN_FLIGHT,
            fence=7,
            started_at=AT,
            tool="refund",
            args={"amount": 2500},
        )
        done = intent.model_copy(update={"status": ActionStatus.SUCCEEDED, "result": {"entry": "L1"}})
        trail = ProposalTrail(
            message_id=f"prop:{T}:2",
            model="rules",
            tool="refund",
            op_key=OP,
            args={"amount": 2500},
            task_version=1,
            approval=bound,
        )
        changes = [
            _change(1, "ev:req-key:ev-create-1", "awaiting_approval", event=create.encode().decode()),
            _change(2, "ev:alice-key:ev-approve-2", "ready", event=approve.encode().decode(), approval=bound),
            _change(3, f"rt:close:{OP}", "closed", proposal=None if self.settled else trail),
        ]
        first = [changes[0].encode(), changes[1].encode()]
        second = [action_record(intent).encode()]
        if self.extra_action:
            other = intent.model_copy(update={"op_key": self.extra_action})
            second.append(action_record(other).encode())
        second += [action_record(done).encode(), changes[2].encode()]
        if self.drop_version:
            first = [r for r in first if f'"state_version":{self.drop_version},' not in r.decode()]
        return first, second


def _change(version: int, message_id: str, stage: str, **more: object) -> OutboxRecord:
    return OutboxRecord(
        record_id=f"{T}:{version}",
        task_id=T,
        state_version=version,
        message_id=message_id,
        stage=stage,
        task_version=1,
        at=AT,
        tenant="default",
        workflow="refund",
        policy="policy-v3",
        tool_catalog="catalog-2",
        **more,  # type: ignore[arg-type]
    )


def _message(records: list[bytes], offset: int, edit: Callable[[bytes], bytes] | None = None) -> Logged:
    headers = tuple((n, v if isinstance(v, bytes) else b"") for n, v in LOG_KEY.headers(topics.LOG, records))
    value = LOG_BATCH_HEAD + b",".join(records) + LOG_BATCH_TAIL
    return Logged(topics.LOG, 0, offset, headers, edit(value) if edit else value)


def _why(found: Audit) -> str:
    return "\n".join(str(p) for p in found.problems)


def test_a_whole_chain_verifies_and_shows_each_link() -> None:
    found = audit(T, Chain().build(), KEYS)
    assert found.verified, _why(found)
    assert found.started is not None and found.started["kind"] == events.CREATE
    assert found.started["verified"] == "ed25519" and found.started["principal"] == "requester"
    [effect] = found.effects
    assert (effect["op_key"], effect["fence"], effect["outcome"]) == (OP, 7, "succeeded")
    assert (effect["policy"], effect["tool_catalog"]) == ("policy-v3", "catalog-2")
    assert effect["proposal"]["model"] == "rules" and "policy decision" in effect["proposal"]["checks"]
    assert effect["approval"]["approver"] == "alice" and effect["approval"]["event"]["verified"] == "ed25519"


CASES: list[tuple[str, Chain, PublicKeys, str, str]] = [
    (
        "edited record",
        Chain(edit=lambda v: v.replace(b'"amount":2500', b'"amount":25000', 1)),
        KEYS,
        f"0:11|{T}:op:{OP}:in_flight:7:0",
        "was edited",
    ),
    ("dropped version", Chain(drop_version=2), KEYS, f"|{T}:2", "change version 2 is missing"),
    ("forged event signature", Chain(approver=MALLORY), KEYS, f"0:10|{T}:2", "signature does not verify"),
    (
        "hmac signer",
        Chain(approver=HmacSigner("alice-key", b"s" * 32)),
        replace(
            KEYS,
            signers={
                **KEYS.signers,
                "alice-key": Signer("alice-key", "hmac-sha256", None, "alice", "default"),
            },
        ),
        f"0:10|{T}:2",
        "no public key can verify it offline",
    ),
    (
        "approval bound to another version",
        Chain(bound_version=2),
        KEYS,
        f"0:11|{T}:3",
        "effect ran at version 1",
    ),
    ("close without its proposal", Chain(settled=True), KEYS, f"0:11|{T}:3", "carries no proposal"),
    ("action never closed", Chain(extra_action=f"LOOKUP:{T}:v1"), KEYS, "0:11|", "is closed by no change"),
    ("log key not exported", Chain(), replace(KEYS, log_keys={}), "0:10|", "exported keys do not hold"),
]


@pytest.mark.parametrize(("case", "chain", "keys", "where", "why"), CASES, ids=[c[0] for c in CASES])
def test_a_broken_link_is_named_with_its_record_and_message(
    case: str, chain: Chain, keys: PublicKeys, where: str, why: str
) -> None:
    found = audit(T, chain.build(), keys)
    assert not found.verified
    at, _, record = where.partition("|")
    named = [p for p in found.problems if why in p.why and p.where == at and record in p.record]
    assert named, f"{case}: no problem at {where!r} saying {why!r} in:\n{_why(found)}"


def test_an_edit_names_only_the_record_edited_even_when_its_length_changed() -> None:
    found = audit(
        T, Chain(edit=lambda v: v.replace(b'"entry":"L1"', b'"entry":"L1-and-more"', 1)).build(), KEYS
    )
    edited = [p for p in found.problems if "was edited" in p.why]
    assert [p.record for p in edited] == [f"{T}:op:{OP}:succeeded:7:0"]


def test_a_step_in_flight_at_the_end_is_shown_not_failed() -> None:
    messages = Chain().build()
    intent = ActionLogEntry(
        op_key=f"NEXT:{T}:v1", task_id=T, status=ActionStatus.IN_FLIGHT, fence=8, started_at=AT
    )
    found = audit(T, [*messages, _message([action_record(intent).encode()], 12)], KEYS)
    assert found.verified, _why(found)
    assert found.in_flight == [f"NEXT:{T}:v1"]


def test_files_round_trip_byte_for_byte() -> None:
    messages = Chain().build()
    lines = [message_line(m) for m in messages]
    assert list(read_messages(lines)) == messages
    alice = VerifyKey("alice-key", "ed25519", _public(ALICE), "alice")
    shared = VerifyKey("h-key", "hmac-sha256", b"secret" * 6, "bob")
    doc = keys_doc({LOG_KEY.key_id: LOG_KEY.public()}, [alice, shared], {"alice-key": ["approval.granted"]})
    assert b"secret" not in doc and base64.b64encode(b"secret" * 6) not in doc
    read = read_keys(doc)
    assert read.signers["h-key"].public is None and read.signers["alice-key"].public == _public(ALICE)


def test_an_edit_of_another_task_s_record_in_a_shared_batch_fails_both_chains() -> None:
    first, second = Chain().records()
    other = ActionLogEntry(
        op_key="REFUND:t-other:v1", task_id="t-other", status=ActionStatus.IN_FLIGHT, fence=1, started_at=AT
    )
    shared = _message(
        [action_record(other).encode(), *second], 11, lambda v: v.replace(b'"fence":1,', b'"fence":9,', 1)
    )
    messages = [_message(first, 10), shared]
    found = audit(T, messages, KEYS)  # the index names no task: a record of T may have gone with it
    assert not found.verified and any("was edited" in p.why for p in found.problems)
    theirs = audit("t-other", messages, KEYS)
    assert any("was edited" in p.why and p.record.startswith("t-other:op:") for p in theirs.problems)


def _forged_outcome(second: list[bytes]) -> bytes:
    """A record of the task the relay never signed: its outcome, said to have booked another entry."""
    outcome = next(r for r in second if b'"status":"succeeded"' in r)
    return outcome.replace(b'"entry":"L1"', b'"entry":"FORGED"', 1).replace(
        b":succeeded:7:0", b":succeeded:8:0", 1
    )


@pytest.mark.parametrize(
    "insert",
    [
        lambda value, decoy, forged: value.replace(
            LOG_BATCH_HEAD, LOG_BATCH_HEAD + decoy + b"," + forged + b",", 1
        ),
        lambda value, decoy, forged: (
            value[: -len(LOG_BATCH_TAIL)] + b'],"records":[' + forged + LOG_BATCH_TAIL
        ),
    ],
    ids=["a-decoy-and-a-forged-record-added", "a-second-records-key"],
)
def test_a_record_added_to_a_signed_message_is_never_read_as_the_tasks(
    insert: Callable[[bytes, bytes, bytes], bytes],
) -> None:
    first, second = Chain().records()
    other = ActionLogEntry(
        op_key="REFUND:t-other:v1", task_id="t-other", status=ActionStatus.IN_FLIGHT, fence=1, started_at=AT
    )
    forged = _forged_outcome(second)
    messages = [
        _message(first, 10),
        _message(second, 11, lambda v: insert(v, action_record(other).encode(), forged)),
    ]
    found = audit(T, messages, KEYS)
    assert not found.verified
    assert not any("FORGED" in str(e) for e in found.effects), "a forged record was read as the task's"


def test_a_record_of_the_task_taken_from_a_signed_message_fails_the_audit() -> None:
    first, second = Chain().records()
    other = ActionLogEntry(
        op_key="REFUND:t-other:v1", task_id="t-other", status=ActionStatus.IN_FLIGHT, fence=1, started_at=AT
    )
    swap = lambda v: v.replace(second[-1], action_record(other).encode(), 1)  # noqa: E731
    found = audit(T, [_message(first, 10), _message(second, 11, swap)], KEYS)
    assert not found.verified


def test_a_verified_event_of_another_task_proves_nothing_of_this_one() -> None:
    from wakeful.operate.audit.links import _not_this_tasks
    from wakeful.schemas.logs import OutboxRecord, WaitSummary

    def change(version: int, waits: tuple[WaitSummary, ...] = ()) -> OutboxRecord:
        return OutboxRecord(
            record_id=f"{T}:{version}", task_id=T, state_version=version, message_id="m",
            stage="ready", task_version=1, at=AT, waits=waits,
        )  # fmt: skip

    waited = change(1, (WaitSummary(wait_for="approval", deadline=AT, correlation_id="corr-a"),))
    theirs = sign_event(
        ALICE, "approval.granted", {"version": 1}, task_id="t-other", event_id="ev-other-1", issued_at=AT
    )
    ours = sign_event(
        ALICE, "approval.granted", {"version": 1}, task_id=T, event_id="ev-ours-01", issued_at=AT
    )
    by_corr = sign_event(
        ALICE,
        "approval.granted",
        {"version": 1},
        correlation_id="corr-a",
        event_id="ev-ours-02",
        issued_at=AT,
    )
    stray = sign_event(
        ALICE,
        "approval.granted",
        {"version": 1},
        correlation_id="corr-b",
        event_id="ev-ours-03",
        issued_at=AT,
    )
    assert _not_this_tasks(theirs, "default", change(2), waited) is not None
    assert _not_this_tasks(ours, "default", change(2), waited) is None
    assert _not_this_tasks(by_corr, "default", change(2), waited) is None
    assert _not_this_tasks(stray, "default", change(2), waited) is not None


def test_a_relay_watermark_among_the_tasks_messages_is_no_link_and_no_problem() -> None:
    """D87: the relay's watermark rides the log beside the tasks' records, signed as they are."""
    watermark = LogWatermark(
        record_id="watermark:r:1", relay="r", watermark_at=datetime.now(UTC), covers=((0, 12),)
    ).encode()
    chain = Chain().build()
    found = audit(T, [*chain, _message([watermark], 99)], KEYS)
    assert found.verified, _why(found)
    assert len(found.changes) == len(audit(T, chain, KEYS).changes)
