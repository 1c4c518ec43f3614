"""Records decode in one place: strict, versioned, upgraded step by step; bad bytes are one typed error."""

from __future__ import annotations

import hashlib
import string
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any, ClassVar

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from wakeful.core.errors import DecodeError, UnknownSchemaVersion
from wakeful.examples.refund import Stage
from wakeful.examples.refund import app as refund_app
from wakeful.schemas import base
from wakeful.schemas.approval import Approval, terms_digest
from wakeful.schemas.base import Record, migration, upgrade
from wakeful.schemas.checkpoint import (
    REFUND_CATALOG_V2,
    BusinessState,
    Checkpoint,
    ExecutionState,
    PendingWait,
    SecurityScope,
    VersionStamps,
)
from wakeful.schemas.logs import ActionLogEntry, ActionStatus, InboxRecord, OutboxRecord

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DIGEST = terms_digest(amount=1250, currency="EUR")


def approval(**overrides: Any) -> Approval:
    fields: dict[str, Any] = {
        "object": "refund",
        "object_version": 2,
        "object_digest": DIGEST,
        "approver_ref": "approver:ops-lead",
        "scope": "refund.execute",
        "expires_at": T0 + timedelta(hours=1),
    }
    return Approval(**(fields | overrides))


def checkpoint(**overrides: Any) -> Checkpoint:
    fields: dict[str, Any] = {
        "task_id": "refund-7",
        "business": BusinessState(
            stage=Stage.AWAITING_APPROVAL, version=2, data={"amount": 1250, "currency": "EUR"}
        ),
        "execution": ExecutionState(
            pending_waits=(
                PendingWait(
                    wait_for="approval",
                    correlation_id="corr-1",
                    bound_to_version=2,
                    allowed_signers=("approver:ops-lead",),
                    deadline=T0 + timedelta(days=2),
                    on_deadline="escalate:ops-lead",
                    then="ready",
                ),
            ),
            attempts=1,
            fence=4,
        ),
        "external_refs": {"ledger": "entry-991"},
        "security": SecurityScope(tenant="acme", principal_ref="principal:agent-1"),
        "versions": VersionStamps(policy="p-3", tool_catalog="tc-9", agent_id="agent-1", state_version=5),
        "updated_at": T0,
    }
    return Checkpoint(**(fields | overrides))


def as_json(record: Record) -> dict[str, Any]:
    doc = orjson.loads(record.encode())
    assert isinstance(doc, dict)
    return doc


def v2_checkpoint() -> dict[str, Any]:
    """A checkpoint as v2 code wrote it: the refund's own fields in the business layer."""
    doc = as_json(checkpoint())
    business = doc["business"]
    business.update(business.pop("data"))
    business.pop("workflow_version")
    evidence = business.pop("evidence")
    business["note_ref"] = f"evidence:{doc['task_id']}:{evidence[0]}" if evidence else None
    for wait in doc["execution"]["pending_waits"]:
        wait.pop("then")
    doc["schema_version"] = doc["versions"]["schema"] = 2
    return doc


def v1_checkpoint() -> dict[str, Any]:
    """A checkpoint as v1 code wrote it: the principal itself in the security layer, schema 1."""
    doc = v2_checkpoint()
    doc["schema_version"] = 1
    doc["security"] = {"tenant": "acme", "principal": "alice"}
    doc["versions"]["schema"] = 1
    return doc


# --- strategies -----------------------------------------------------------------------------------

# orjson writes integers only up to 64 bits; text without lone surrogates, which JSON cannot carry.
ints = st.integers(-(2**63), 2**63 - 1)
texts = st.text(st.characters(codec="utf-8"), max_size=12)
state_versions = st.integers(0, 2**63 - 1)  # state_version is bounded to what the seal header stores
offsets = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
zones: st.SearchStrategy[tzinfo] = st.one_of(st.just(UTC), offsets)
naive_instants = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1))
instants = naive_instants | st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=zones
)
task_ids = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)

approvals = st.builds(
    Approval,
    object=texts,
    object_version=ints,
    object_digest=texts,
    approver_ref=texts,
    scope=texts,
    expires_at=instants,
    single_use=st.booleans(),
    consumed=st.booleans(),
)
pending_waits = st.builds(
    PendingWait,
    wait_for=texts,
    correlation_id=texts,
    bound_to_version=ints,
    allowed_signers=st.lists(texts, max_size=3).map(tuple),
    deadline=instants,
    on_deadline=texts,
)
checkpoints = st.builds(
    Checkpoint,
    task_id=task_ids,
    business=st.builds(
        BusinessState,
        workflow=texts,
        stage=st.sampled_from(Stage),
        version=ints,
        data=st.dictionaries(texts, ints | texts, max_size=3),
        evidence=st.lists(texts, max_size=2).map(tuple),
        approval=st.none() | approvals,
        last_refusal=st.none() | texts,
    ),
    execution=st.builds(
        ExecutionState,
        pending_waits=st.lists(pending_waits, max_size=3).map(tuple),
        attempts=ints,
        fence=ints,
    ),
    external_refs=st.dictionaries(texts, texts, max_size=3),
    security=st.builds(SecurityScope, tenant=texts, principal_ref=texts),
    versions=st.builds(
        VersionStamps, policy=texts, tool_catalog=texts, agent_id=texts, state_version=state_versions
    ),
    updated_at=instants,
    created_at=st.none() | instants,
)
json_values = st.recursive(
    st.none() | st.booleans() | ints | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=12,
)


# --- Record: decode in one place ------------------------------------------------------------------


class Widget(Record):
    """A record kind that exists only in these tests, at schema 3, so migrations can be exercised freely."""

    KIND: ClassVar[str] = "test-widget"
    SCHEMA: ClassVar[int] = 3
    schema_version: int = SCHEMA

    name: str
    size: int
    colour: str


@pytest.fixture()
def widget_steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Register v1->v2 (rename `label` to `name`) and v2->v3 (add `colour`) in a private registry."""
    monkeypatch.setattr(base, "_MIGRATIONS", dict(base._MIGRATIONS))
    ran: list[int] = []

    @migration("test-widget", 1)
    def _rename(data: dict[str, Any]) -> dict[str, Any]:
        ran.append(1)
        data["name"] = data.pop("label")
        return data

    @migration("test-widget", 2)
    def _add_colour(data: dict[str, Any]) -> dict[str, Any]:
        ran.append(2)
        assert data["schema_version"] == 2  # each step sees the record at its own version
        data.setdefault("colour", "grey")
        return data

    yield ran


def test_older_record_is_upgraded_one_step_at_a_time_in_order(widget_steps: list[int]) -> None:
    widget = Widget.decode(b'{"schema_version": 1, "label": "bolt", "size": 3}')
    assert widget == Widget(name="bolt", size=3, colour="grey")
    assert widget.schema_version == 3
    assert widget_steps == [1, 2]


def test_record_one_version_behind_runs_only_the_last_step(widget_steps: list[int]) -> None:
    widget = Widget.decode(b'{"schema_version": 2, "name": "bolt", "size": 3, "colour": "red"}')
    assert widget == Widget(name="bolt", size=3, colour="red")
    assert widget_steps == [2]


def test_current_record_is_decoded_without_any_migration(widget_steps: list[int]) -> None:
    widget = Widget.decode(Widget(name="bolt", size=3, colour="red").encode())
    assert widget.colour == "red"
    assert widget_steps == []


def test_upgrade_does_not_touch_the_callers_record(widget_steps: list[int]) -> None:
    data: dict[str, Any] = {"schema_version": 1, "label": "bolt", "size": 3}
    upgraded = upgrade("test-widget", 3, data, b"")
    assert upgraded == {"schema_version": 3, "name": "bolt", "size": 3, "colour": "grey"}
    assert data == {"schema_version": 1, "label": "bolt", "size": 3}


def test_gap_in_the_migration_chain_is_a_decode_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "_MIGRATIONS", dict(base._MIGRATIONS))
    migration("test-widget", 1)(lambda data: data)  # but nothing from v2
    raw = b'{"schema_version": 1, "name": "bolt", "size": 3, "colour": "red"}'
    with pytest.raises(DecodeError) as info:
        Widget.decode(raw)
    assert "no migration registered from test-widget v2" in info.value.reason
    assert info.value.raw == raw


def test_two_migrations_for_the_same_step_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "_MIGRATIONS", dict(base._MIGRATIONS))

    def first(data: dict[str, Any]) -> dict[str, Any]:
        return data

    migration("test-widget", 1)(first)
    with pytest.raises(RuntimeError, match="two migrations registered for test-widget v1"):
        migration("test-widget", 1)(lambda data: {})
    assert base._MIGRATIONS[("test-widget", 1)] is first


def test_record_from_newer_code_is_refused_as_unknown_schema_version() -> None:
    with pytest.raises(UnknownSchemaVersion) as info:
        Widget.decode(b'{"schema_version": 4, "name": "bolt", "size": 3, "colour": "red"}')
    error = info.value
    assert isinstance(error, DecodeError)
    assert (error.kind, error.version, error.known) == ("test-widget", 4, 3)
    assert "deploy the newer wakeful" in str(error)


def test_unknown_schema_version_error_still_carries_the_raw_record() -> None:
    # Every DecodeError carries the raw input so a consumer can dead-letter it; this subclass must too.
    raw = b'{"schema_version": 4, "name": "bolt", "size": 3, "colour": "red"}'
    with pytest.raises(UnknownSchemaVersion) as info:
        Widget.decode(raw)
    assert info.value.raw == raw


@pytest.mark.parametrize(
    "version",
    [None, 0, -1, "3", 3.0, [3]],
    ids=["null", "zero", "negative", "string", "float", "list"],
)
def test_schema_version_must_be_a_positive_integer(version: object) -> None:
    raw = orjson.dumps({"schema_version": version, "name": "bolt", "size": 3, "colour": "red"})
    with pytest.raises(DecodeError) as info:
        Widget.decode(raw)
    assert "schema_version" in info.value.reason
    assert info.value.raw == raw


def test_missing_schema_version_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="schema_version is None"):
        Widget.decode(b'{"name": "bolt", "size": 3, "colour": "red"}')


def test_boolean_schema_version_is_refused_even_when_migrations_exist() -> None:
    # JSON `true` is not a version. Python's bool is an int equal to 1, so it must be refused explicitly,
    # or it is silently read as v1 and migrated.
    doc = as_json(checkpoint()) | {"schema_version": True}
    with pytest.raises(DecodeError):
        Checkpoint.decode(orjson.dumps(doc))


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "not JSON"),
        (b"{", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'"checkpoint"', "not a JSON object"),
        (b"null", "not a JSON object"),
    ],
)
def test_bytes_that_are_not_a_json_object_are_a_decode_error_carrying_them(raw: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        Widget.decode(raw)
    assert (info.value.kind, info.value.raw) == ("test-widget", raw)
    assert info.value.reason.startswith(reason)
    assert str(info.value).startswith("malformed test-widget: ")


def test_invalid_fields_are_named_in_the_reason_three_at_most() -> None:
    raw = b'{"schema_version": 3, "name": 1, "size": "3", "colour": 2, "extra": 0}'
    with pytest.raises(DecodeError) as info:
        Widget.decode(raw)
    shown, more = info.value.reason.rsplit(" (", 1)
    assert {part.split(":")[0] for part in shown.split("; ")} < {"name", "size", "colour", "extra"}
    assert len(shown.split("; ")) == 3
    assert more == "+1 more)"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"schema_version": 3, "name": "bolt", "size": "3", "colour": "red"}',
        b'{"schema_version": 3, "name": "bolt", "size": 3.0, "colour": "red"}',
        b'{"schema_version": 3, "name": "bolt", "size": true, "colour": "red"}',
        b'{"schema_version": 3, "name": 7, "size": 3, "colour": "red"}',
        b'{"schema_version": 3, "name": "bolt", "size": 3}',
        b'{"schema_version": 3, "name": "bolt", "size": 3, "colour": "red", "shape": "hex"}',
    ],
    ids=["int-as-string", "int-as-float", "int-as-bool", "str-as-int", "missing-field", "unknown-field"],
)
def test_decoding_is_strict_no_coercion_no_unknown_fields(raw: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        Widget.decode(raw)
    assert info.value.raw == raw


def test_records_are_immutable() -> None:
    cp = checkpoint()
    with pytest.raises(ValidationError):
        cp.task_id = "refund-8"
    assert cp.task_id == "refund-7"


# --- Checkpoint -----------------------------------------------------------------------------------


@settings(max_examples=200)
@given(cp=checkpoints)
def test_any_checkpoint_survives_encode_and_decode_unchanged(cp: Checkpoint) -> None:
    raw = cp.encode()
    decoded = Checkpoint.decode(raw)
    assert decoded == cp
    assert decoded.encode() == raw


def test_checkpoint_is_stored_as_five_layers_plus_identity() -> None:
    doc = as_json(checkpoint())
    assert set(doc) == {
        "schema_version",
        "task_id",
        "updated_at",
        "created_at",
        "business",
        "execution",
        "external_refs",
        "security",
        "versions",
    }
    assert doc["schema_version"] == Checkpoint.SCHEMA == 5


def test_layers_carry_no_schema_version_of_their_own() -> None:
    doc = as_json(
        checkpoint(business=BusinessState(stage=Stage.READY, data={"amount": 1}, approval=approval()))
    )
    for layer in ("business", "execution", "security", "versions"):
        assert "schema_version" not in doc[layer]
    assert "schema_version" not in doc["execution"]["pending_waits"][0]
    # An approval is a record in its own right and keeps its version inside the business layer.
    assert doc["business"]["approval"]["schema_version"] == Approval.SCHEMA


def test_version_stamps_are_stored_under_schema_and_read_back() -> None:
    doc = as_json(checkpoint())
    assert doc["versions"]["schema"] == 5
    assert "schema_" not in doc["versions"]
    assert Checkpoint.decode(orjson.dumps(doc)).versions.schema_ == 5


def test_stage_and_state_version_read_from_their_layers() -> None:
    cp = checkpoint(
        business=BusinessState(stage=Stage.READY, data={"amount": 10}),
        versions=VersionStamps(policy="p", tool_catalog="t", agent_id="a", state_version=17),
    )
    assert (cp.stage, cp.state_version) == (Stage.READY, 17)


def test_security_layer_refuses_a_principal_itself() -> None:
    # v2 keeps only a reference to the principal: a credential-bearing field is an unknown field.
    doc = as_json(checkpoint())
    doc["security"]["principal"] = "alice"
    with pytest.raises(DecodeError, match=r"security\.principal"):
        Checkpoint.decode(orjson.dumps(doc))


def test_a_stage_not_in_the_stage_alphabet_is_a_decode_error() -> None:
    doc = as_json(checkpoint())
    doc["business"]["stage"] = "Executing now!"
    with pytest.raises(DecodeError, match=r"business\.stage"):
        Checkpoint.decode(orjson.dumps(doc))


@pytest.mark.parametrize(
    "task_id",
    [
        *("a", "Z", "0", "_", "-", "a" * 64, string.ascii_letters + string.digits + "_-"),
        *("globex.t-1", "globex.eu.t-1", f"{'g' * 64}.{'a' * 64}"),  # a tenant's own id, after its name
    ],
)
def test_task_ids_of_the_safe_alphabet_are_accepted(task_id: str) -> None:
    assert checkpoint(task_id=task_id).task_id == task_id


@pytest.mark.parametrize(
    "task_id",
    ["", "a" * 65, "a:b", "{a}", "a b", "a*", "a?", "a/b", "é", "a\x00", "\na", "a\r", "a.", ".a", "a.b."],
    ids=repr,
)
def test_task_ids_outside_the_safe_alphabet_are_refused(task_id: str) -> None:
    with pytest.raises(ValidationError, match="a task id must match"):
        checkpoint(task_id=task_id)


def test_task_id_with_a_trailing_newline_is_refused() -> None:
    # Task ids go into Redis key names and ACL patterns; "abc\n" must not pass as "abc".
    with pytest.raises(ValidationError):
        checkpoint(task_id="abc\n")
    doc = as_json(checkpoint()) | {"task_id": "abc\n"}
    with pytest.raises(DecodeError):
        Checkpoint.decode(orjson.dumps(doc))


SAFE = set(string.ascii_letters + string.digits + "_-")


def runtime_task_id(value: str) -> bool:
    """1-64 safe characters, after a tenant's name (1-64 of them or `.`) and a `.` (D52)."""
    tenant, dot, own = value.rpartition(".")
    mine = 1 <= len(own) <= 64 and set(own) <= SAFE
    return mine and (not dot or (1 <= len(tenant) <= 64 and set(tenant) <= SAFE | {"."}))


@settings(max_examples=300)
@given(task_id=st.text(max_size=140) | st.from_regex(r"[a-z.]{0,66}\.[a-z_-]{0,66}", fullmatch=True))
@example(task_id="a" * 64)
@example(task_id="a" * 65)
@example(task_id="abc\n")
@example(task_id="globex.t-1")
@example(task_id=".t-1")
@example(task_id="globex.")
def test_a_task_id_is_accepted_exactly_when_it_is_a_tenants_safe_id_after_its_name(task_id: str) -> None:
    safe = runtime_task_id(task_id)
    try:
        cp = checkpoint(task_id=task_id)
    except ValidationError:
        assert not safe
    else:
        assert safe
        assert cp.task_id == task_id


# --- Checkpoint v1 -> v2 -> v3 --------------------------------------------------------------------


def test_v1_checkpoint_is_upgraded_to_keep_only_a_principal_reference() -> None:
    cp = Checkpoint.decode(orjson.dumps(v1_checkpoint()))
    assert cp.schema_version == 5
    assert cp.security == SecurityScope(tenant="acme", principal_ref="principal:alice")
    assert cp.versions.schema_ == 5
    assert "alice" not in cp.security.model_dump_json().replace("principal:alice", "")


def test_v1_upgrade_leaves_every_other_layer_as_it_was() -> None:
    cp = Checkpoint.decode(orjson.dumps(v1_checkpoint()))
    assert cp.model_copy(update={"security": checkpoint().security}) == checkpoint()


def test_v1_checkpoint_that_already_had_a_reference_keeps_it() -> None:
    doc = v1_checkpoint()
    doc["security"] = {"tenant": "acme", "principal_ref": "principal:bob"}
    assert Checkpoint.decode(orjson.dumps(doc)).security.principal_ref == "principal:bob"


def test_upgraded_v1_checkpoint_is_written_back_at_the_current_version() -> None:
    upgraded = Checkpoint.decode(orjson.dumps(v1_checkpoint()))
    doc = as_json(upgraded)
    assert (doc["schema_version"], doc["versions"]["schema"]) == (5, 5)
    assert Checkpoint.decode(upgraded.encode()) == upgraded


def test_v2_checkpoint_keeps_the_refunds_fields_as_the_workflows_own_data() -> None:
    upgraded = Checkpoint.decode(orjson.dumps(v2_checkpoint()))
    assert upgraded == checkpoint()
    assert upgraded.business.data == {"amount": 1250, "currency": "EUR"}


def test_v2_note_reference_becomes_a_named_evidence_document() -> None:
    doc = v2_checkpoint()
    doc["business"]["note_ref"] = "evidence:refund-7:note"
    assert Checkpoint.decode(orjson.dumps(doc)).business.evidence == ("note",)


def test_v2_approval_wait_leads_to_ready_once_approved() -> None:
    waits = Checkpoint.decode(orjson.dumps(v2_checkpoint())).execution.pending_waits
    assert waits and all(w.then == "ready" for w in waits if w.wait_for == "approval")


def test_v2_refund_catalog_by_name_becomes_the_refund_apps_catalog_digest_of_then() -> None:
    doc = v2_checkpoint()
    doc["versions"]["tool_catalog"] = "catalog-1"
    # What the refund's tools were stamped as before a stamp had two parts: gate 4 takes it as them.
    assert Checkpoint.decode(orjson.dumps(doc)).versions.tool_catalog == refund_app.legacy_catalog
    # If this fails, the refund's tools changed: gate 4 no longer takes their stamp as them, and tasks from
    # before it follow the declared tool_catalog rule. Leave REFUND_CATALOG_V2 as it is.
    assert refund_app.legacy_catalog == REFUND_CATALOG_V2


def test_a_v4_checkpoint_reads_as_one_that_never_said_when_it_was_created() -> None:
    doc = as_json(checkpoint(created_at=datetime(2026, 1, 1, tzinfo=UTC)))
    del doc["created_at"]
    doc["schema_version"] = doc["versions"]["schema"] = 4
    upgraded = Checkpoint.decode(orjson.dumps(doc))
    assert (upgraded.schema_version, upgraded.versions.schema_, upgraded.created_at) == (5, 5, None)
    assert upgraded == checkpoint()  # nothing else of it moved
    assert Checkpoint.decode(upgraded.encode()) == upgraded


def test_v1_checkpoint_without_layers_is_a_decode_error() -> None:
    raw = b'{"schema_version": 1, "task_id": "refund-7"}'
    with pytest.raises(DecodeError) as info:
        Checkpoint.decode(raw)
    assert info.value.raw == raw


@pytest.mark.parametrize("layer", ["security", "versions"])
@pytest.mark.parametrize("value", [None, "ab"], ids=["null", "string"])
def test_v1_checkpoint_with_a_malformed_layer_is_a_decode_error_not_a_crash(
    layer: str, value: object
) -> None:
    doc = v1_checkpoint() | {layer: value}
    raw = orjson.dumps(doc)
    with pytest.raises(DecodeError) as info:
        Checkpoint.decode(raw)
    assert info.value.raw == raw


# --- Checkpoint.decode never crashes --------------------------------------------------------------


@settings(max_examples=200)
@given(raw=st.binary(max_size=200))
def test_arbitrary_bytes_are_a_decode_error(raw: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        Checkpoint.decode(raw)
    assert info.value.kind == "checkpoint"


@settings(max_examples=200)
@given(
    doc=st.fixed_dictionaries(
        {"schema_version": st.sampled_from([1, 2]) | json_values},
        optional={
            key: json_values | st.dictionaries(texts, json_values, max_size=3)
            for key in sorted(set(Checkpoint.model_fields) - {"schema_version"})
        },
    )
)
@example(doc={"schema_version": 1, "security": None})
def test_any_json_object_decodes_to_a_checkpoint_or_a_decode_error(doc: dict[str, Any]) -> None:
    raw = orjson.dumps(doc)
    try:
        cp = Checkpoint.decode(raw)
    except DecodeError as error:
        assert error.kind == "checkpoint"
        return
    assert cp.schema_version == 2


@settings(max_examples=200)
@given(data=st.data())
def test_an_edited_checkpoint_decodes_to_a_checkpoint_or_a_decode_error(data: st.DataObject) -> None:
    raw = bytearray(checkpoint().encode())
    pos = data.draw(st.integers(0, len(raw) - 1), label="pos")
    raw[pos] = data.draw(st.integers(0, 255), label="byte")
    try:
        cp = Checkpoint.decode(bytes(raw))
    except DecodeError as error:
        assert error.raw == bytes(raw)
        return
    assert isinstance(cp, Checkpoint)


# --- Approval -------------------------------------------------------------------------------------


def test_approval_binds_only_the_version_and_digest_it_was_given_for() -> None:
    given_for = approval(object_version=2, object_digest=DIGEST)
    assert given_for.binds(2, DIGEST)
    assert not given_for.binds(3, DIGEST)
    assert not given_for.binds(2, terms_digest(amount=1251, currency="EUR"))
    assert not given_for.binds(1, "")


def test_approval_expires_at_its_expiry_instant_not_after() -> None:
    expiring = approval(expires_at=T0)
    assert not expiring.expired(T0 - timedelta(microseconds=1))
    assert expiring.expired(T0)
    assert expiring.expired(T0 + timedelta(days=1))


def test_approval_is_single_use_and_unconsumed_by_default() -> None:
    fresh = approval()
    assert (fresh.single_use, fresh.consumed) == (True, False)


@settings(max_examples=200)
@given(record=approvals)
def test_any_approval_survives_encode_and_decode_unchanged(record: Approval) -> None:
    assert Approval.decode(record.encode()) == record


def test_terms_digest_is_sha256_of_sorted_compact_json() -> None:
    # Digests are stored inside approvals: this format must never change, or every approval is void.
    expected = hashlib.sha256(b'{"amount":1250,"currency":"EUR"}').hexdigest()
    assert terms_digest(currency="EUR", amount=1250) == expected


@settings(max_examples=200)
@given(terms=st.dictionaries(st.text(min_size=1, max_size=8), json_values, min_size=1, max_size=6))
def test_terms_digest_ignores_the_order_terms_are_given_in(terms: dict[str, Any]) -> None:
    assert terms_digest(**terms) == terms_digest(**dict(reversed(list(terms.items()))))


@settings(max_examples=200)
@given(
    terms=st.dictionaries(st.text(min_size=1, max_size=8), json_values, min_size=1, max_size=6),
    data=st.data(),
)
def test_changing_any_single_term_changes_the_digest(terms: dict[str, Any], data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(terms)), label="key")
    new_value = data.draw(json_values.filter(lambda v: orjson.dumps(v) != orjson.dumps(terms[key])))
    assert terms_digest(**(terms | {key: new_value})) != terms_digest(**terms)


# --- logs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", list(ActionStatus))
def test_action_log_entry_round_trips_in_every_status(status: ActionStatus) -> None:
    entry = ActionLogEntry(
        op_key="REFUND:refund-7:v2",
        task_id="refund-7",
        status=status,
        fence=4,
        started_at=T0,
        finished_at=None if status is ActionStatus.IN_FLIGHT else T0 + timedelta(seconds=2),
        result={"ledger": "entry-991", "amount": 1250} if status is ActionStatus.SUCCEEDED else None,
        reason="declined" if status is ActionStatus.FAILED else None,
    )
    assert ActionLogEntry.decode(entry.encode()) == entry
    assert as_json(entry)["status"] == status.value


def test_action_intent_is_recorded_with_no_outcome_yet() -> None:
    intent = ActionLogEntry(
        op_key="REFUND:refund-7:v2", task_id="refund-7", status=ActionStatus.IN_FLIGHT, fence=4, started_at=T0
    )
    assert (intent.finished_at, intent.result, intent.reason) == (None, None, None)


def test_action_status_values_are_the_stored_names() -> None:
    assert [s.value for s in ActionStatus] == ["in_flight", "succeeded", "failed"]


def test_unknown_action_status_is_a_decode_error() -> None:
    doc = {
        "schema_version": 1,
        "op_key": "REFUND:refund-7:v2",
        "task_id": "refund-7",
        "status": "maybe",
        "fence": 4,
        "started_at": T0.isoformat(),
    }
    with pytest.raises(DecodeError, match="status"):
        ActionLogEntry.decode(orjson.dumps(doc))


def test_inbox_record_must_say_which_task_even_if_none() -> None:
    refused = InboxRecord(message_id="m-1", task_id=None, accepted=False, reason="bad signature", at=T0)
    assert InboxRecord.decode(refused.encode()) == refused
    doc = as_json(refused)
    del doc["task_id"]
    with pytest.raises(DecodeError, match="task_id"):
        InboxRecord.decode(orjson.dumps(doc))


@settings(max_examples=200)
@given(
    record=st.builds(
        OutboxRecord,
        record_id=texts,
        task_id=texts,
        state_version=ints,
        message_id=texts,
        stage=texts,
        task_version=ints,
        at=instants,
        detail=st.dictionaries(texts, json_values, max_size=3),
    )
)
def test_any_outbox_record_survives_encode_and_decode_unchanged(record: OutboxRecord) -> None:
    assert OutboxRecord.decode(record.encode()) == record
    # Records written before encode() used pydantic's serializer were orjson's, byte for byte.
    assert record.encode() == orjson.dumps(record.model_dump(mode="json", by_alias=True))


def test_a_record_of_one_kind_never_decodes_as_another() -> None:
    inbox = InboxRecord(message_id="m-1", task_id="refund-7", accepted=True, at=T0).encode()
    outbox = OutboxRecord(
        record_id="refund-7:5",
        task_id="refund-7",
        state_version=5,
        message_id="m-1",
        stage="ready",
        task_version=2,
        at=T0,
    ).encode()
    for raw, wrong in ((inbox, OutboxRecord), (outbox, InboxRecord), (checkpoint().encode(), Approval)):
        with pytest.raises(DecodeError):
            wrong.decode(raw)
