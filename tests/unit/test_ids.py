"""Ids from outside are checked at the door and again by every key builder, so none can name a key.

A task id holding `}` once made a receipt key that inbound writes also name another task's lease
(`wk:{X}:receipt:Y}:lease`), wedging that task for a week; a 60 KB task id left a 131 KB key. Task,
event, correlation and key ids now have an alphabet without braces, colons, `|`, whitespace or
control characters, and a length limit: a bad one is a DecodeError at decode time (a dead letter
with its reason), and `state.keys` refuses to build a key from it. Redis itself runs with a memory
limit and `noeviction`. The alphabets are spelled out here again, as the specification. The same
ids sent to the real stack from outside: tests/test_ids_stack.py.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers import refund_proposal
from hypothesis import example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from wakeful.consumers.inbound.main import Refused, parse
from wakeful.core import ids
from wakeful.core.errors import ConfigError, DecodeError
from wakeful.core.settings import Settings
from wakeful.devstack import redis_server
from wakeful.examples import bank
from wakeful.producers.signing import HmacSigner, sign_event
from wakeful.schemas import events
from wakeful.schemas.events import Envelope, SignedEvent
from wakeful.state import keys

SPEC = {
    "task_id": re.compile(r"[A-Za-z0-9_-]{1,64}"),
    "event_id": re.compile(r"[A-Za-z0-9_.-]{8,128}"),
    "correlation_id": re.compile(r"[A-Za-z0-9_.-]{1,128}"),
    "key_id": re.compile(r"[A-Za-z0-9_.@-]{1,128}"),
}
# The runtime's task ids: a tenant's own id, after its tenant's name and a `.` but for the default
# tenant's (D52). Only these name task keys.
RUNTIME_TASK_ID = re.compile(r"(?:[A-Za-z0-9_.-]{1,64}\.)?[A-Za-z0-9_-]{1,64}")
FORBIDDEN = ("{", "}", ":", "|")
# Long enough for every id's minimum length, so the character is what is refused (and "" the length).
BAD_PARTS = [
    "",
    "a" * 300,
    "X}:lease",
    "ev-aaa{bbb",
    "ev-aaa:bbb",
    "ev-aaa|bbb",
    "ev-aaa bbb",
    "ev-aaa\tbbb",
    "ev-aaa\nbbb",
    "ev-aaa\x00bbb",
    "ev-caf\u00e9-01",
]
UI = HmacSigner("ui-1", b"shared-secret-of-the-approvals-ui")


def short(value: str) -> str:
    return repr(value) if len(value) < 20 else f"{len(value)} chars"


def seen_key(event_id: str, key_id: str = "key-ui") -> str:
    return keys.seen(key_id, event_id)


def receipt_key(event_id: str, task_id: str | None = None, key_id: str = "key-ui") -> str:
    return keys.receipt(event_id, task_id, key_id=key_id)


def attacker_event(signer: HmacSigner | None = None, **fields: Any) -> bytes:
    """An event as an outsider writes it, with no wakeful model in the way; HMAC-signed if asked."""
    doc: dict[str, Any] = {
        "schema_version": 1,
        "event_id": f"ev-{uuid.uuid4().hex}",
        "kind": events.CREATE,
        "task_id": "t-1",
        "correlation_id": None,
        "key_id": signer.key_id if signer else "key-nobody",
        "issued_at": datetime.now(UTC).isoformat(),
        "payload": {"amount": 100, "currency": "EUR"},
    } | fields
    canonical = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    tag = hmac.new(signer.secret, canonical, hashlib.sha256).digest() if signer else b"not signed"
    return orjson.dumps(doc | {"signature": base64.b64encode(tag).decode()})


def malformed(raw: bytes) -> str:
    parsed = parse(raw)
    assert isinstance(parsed, Refused), f"accepted at the door: {parsed!r}"[:300]
    assert parsed.event is None and parsed.reason.startswith("malformed event:"), parsed.reason
    return parsed.reason


# ---- the door: wire models ----------------------------------------------------------------------


def test_task_id_with_a_brace_is_refused_at_the_door_and_names_no_key() -> None:
    reason = malformed(attacker_event(UI, task_id="X}:lease"))
    assert "task_id" in reason
    with pytest.raises(ValueError, match="task id"):
        receipt_key("ev-00000001", "X}:lease")


def test_event_id_with_a_brace_cannot_make_a_receipt_that_is_another_tasks_lease() -> None:
    # The receipt of event "Y}:lease" for task X would be the lease key of task "X}:receipt:Y".
    reason = malformed(attacker_event(UI, task_id="X", event_id="Y0000000}:lease"))
    assert "event_id" in reason
    with pytest.raises(ValueError, match="event id"):
        receipt_key("Y0000000}:lease", "X")
    with pytest.raises(ValueError, match="task id"):
        keys.lease("X}:receipt:Y0000000")


def test_a_60_kb_task_id_is_refused_at_the_door_before_it_can_name_a_key() -> None:
    raw = attacker_event(task_id="a" * 60_000)
    assert len(raw) < events.MAX_EVENT_BYTES  # under the size limit: the id check is what stops it
    reason = malformed(raw)
    assert "task_id" in reason and len(reason) < 200


@pytest.mark.parametrize("field", sorted(SPEC))
@pytest.mark.parametrize("bad", BAD_PARTS, ids=short)
def test_every_outside_id_with_a_forbidden_character_or_length_is_a_malformed_event(
    field: str, bad: str
) -> None:
    assert field in malformed(attacker_event(UI, **{field: bad}))


@pytest.mark.parametrize(
    "field", ["task_id", "message_id", "trace_id"], ids=["task_id", "message_id", "trace_id"]
)
@pytest.mark.parametrize("bad", ["X}:lease", "a{b", "a|b", "a b", "a\x00b", "", "a" * 400], ids=short)
def test_an_envelope_with_a_bad_id_is_a_decode_error_in_every_role(field: str, bad: str) -> None:
    doc = orjson.loads(refund_proposal("t-1", 3, 100).encode()) | {field: bad}
    with pytest.raises(DecodeError) as caught:
        Envelope.decode(orjson.dumps(doc))
    assert field in caught.value.reason


def test_ids_wakeful_itself_makes_are_accepted_everywhere() -> None:
    event = sign_event(
        UI, events.APPROVE, {"version": 1}, task_id="t-0a1b2c3d4e5f", correlation_id="corr-ab12"
    )
    assert parse(event.encode()) == event
    for message_id in ("propreq:t-1:7", "proposal:t-1:7", "deadline:t-1:1767225600000", event.event_id):
        doc = orjson.loads(refund_proposal("t-1", 7, 100).encode()) | {"message_id": message_id}
        assert Envelope.decode(orjson.dumps(doc)).message_id == message_id
    assert receipt_key(event.event_id, "t-0a1b2c3d4e5f").startswith("wk:{t-0a1b2c3d4e5f}:receipt:")
    assert seen_key(event.event_id).endswith(f":{event.event_id}")
    assert keys.corr("corr-ab12") == "wk:corr:corr-ab12"
    assert bank.entry_key("REFUND:t-1:v2") == "bank:{ledger}:entry:REFUND:t-1:v2"


def _accepts(field: str, value: str) -> bool:
    base = orjson.loads(attacker_event(UI))
    try:
        SignedEvent.model_validate(base | {field: value, "issued_at": datetime.now(UTC)})
    except ValueError:
        return False
    return True


any_ids = st.one_of(
    st.text(max_size=200),
    st.text(alphabet=st.characters(codec="ascii"), max_size=140),
    st.from_regex(r"[A-Za-z0-9_.@:{}|-]{0,140}", fullmatch=True),
)


@pytest.mark.parametrize("field", sorted(SPEC))
@hsettings(max_examples=300, deadline=None)
@given(value=any_ids)
@example(value="X}:lease")
@example(value="a" * 64)
def test_an_id_is_accepted_exactly_when_it_matches_its_alphabet_and_length(field: str, value: str) -> None:
    accepted = _accepts(field, value)
    assert accepted == bool(SPEC[field].fullmatch(value)), (field, value)
    if accepted:
        assert not any(c in value for c in FORBIDDEN)


# ---- the second line: key builders ---------------------------------------------------------------

TASK_KEYS: list[Callable[[str], str]] = [
    keys.state,
    keys.ctr,
    keys.lease,
    keys.fence,
    keys.inbox,
    keys.outbox,
    keys.ops,
    keys.quarantine,
    keys.evidence,
    bank.fence_key,
    bank.faults_key,
]


@pytest.mark.parametrize("build", TASK_KEYS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("bad", BAD_PARTS, ids=short)
def test_no_key_builder_names_a_key_with_a_bad_task_id(build: Callable[[str], str], bad: str) -> None:
    with pytest.raises(ValueError, match="cannot name a Redis key"):
        build(bad)
    if bad:  # an empty task id is a receipt refused before its task was known
        with pytest.raises(ValueError, match="cannot name a Redis key"):
            receipt_key("ev-00000001", bad)


@pytest.mark.parametrize(
    "build", [seen_key, keys.corr, receipt_key, bank.entry_key], ids=["seen", "corr", "receipt", "bank"]
)
@pytest.mark.parametrize(
    "bad",
    ["", "Y0000000}:lease", "ev-aaa{bbb", "ev-aaa|bbb", "ev-aaa bbb", "ev-aaa\nbbb", "a" * 300],
    ids=short,
)
def test_no_key_builder_names_a_key_with_a_bad_event_correlation_or_op_id(
    build: Callable[[str], str], bad: str
) -> None:
    with pytest.raises(ValueError, match="cannot name a Redis key"):
        build(bad)


@hsettings(max_examples=300, deadline=None)
@given(value=any_ids)
def test_a_task_key_is_built_only_from_a_task_id_and_holds_exactly_one_hash_tag(value: str) -> None:
    try:
        name = keys.lease(value)
    except ValueError:
        assert not RUNTIME_TASK_ID.fullmatch(value)
        return
    assert RUNTIME_TASK_ID.fullmatch(value)
    assert name.count("{") == 1 and name.count("}") == 1 and keys.task_of(name) == value


@pytest.mark.parametrize("bad", ["", "key}:lease", "key:x", "key|x", "key x", "k" * 129], ids=short)
def test_no_seen_or_receipt_key_names_a_bad_signer_key_id(bad: str) -> None:
    with pytest.raises(ValueError, match="key id"):
        seen_key("ev-00000001", bad)
    with pytest.raises(ValueError, match="key id"):
        receipt_key("ev-00000001", "t-1", bad)


def test_bank_op_keys_may_hold_colons_but_never_a_brace_or_a_bar() -> None:
    assert bank.entry_key("REFUND:t-1:v12") == "bank:{ledger}:entry:REFUND:t-1:v12"
    for bad in ("REFUND:{t-1}:v1", "REFUND|t-1", "REFUND t-1", "R" * 201):
        with pytest.raises(ValueError, match="op key"):
            bank.entry_key(bad)


# ---- Redis memory: a limit, and never an eviction -----------------------------------------------


def test_redis_maxmemory_setting_defaults_to_1gb_and_refuses_no_limit_or_nonsense() -> None:
    assert Settings.from_env({}).redis_maxmemory == "1gb"
    assert Settings.from_env({"WAKEFUL_REDIS_MAXMEMORY": "512MB"}).redis_maxmemory == "512mb"
    for bad in ("0", "lots", "1tb", "-1gb", "1mb", "1 gb"):
        with pytest.raises(ConfigError, match="WAKEFUL_REDIS_MAXMEMORY"):
            Settings.from_env({"WAKEFUL_REDIS_MAXMEMORY": bad})


def test_the_local_redis_is_configured_with_the_limit_and_noeviction(tmp_path: Path) -> None:
    settings = Settings.from_env({"WAKEFUL_HOME": str(tmp_path), "WAKEFUL_REDIS_MAXMEMORY": "256mb"})
    lines = redis_server._write_config(settings).read_text().splitlines()
    assert "maxmemory 256mb" in lines and "maxmemory-policy noeviction" in lines


@pytest.mark.parametrize("tenant", ["default", "globex.eu", "a-b_c"])
def test_a_correlation_entry_gives_back_its_tenant_and_task_and_an_old_one_no_tenant(tenant: str) -> None:
    assert keys.corr_target(keys.corr_value(tenant, "t-1").encode()) == (tenant, "t-1")
    assert keys.corr_target(b"t-1") == (None, "t-1")  # written before the tenant was


OUTSIDE_IDS = st.from_regex(f"^{ids.OUTSIDE_TASK_ID}$", fullmatch=True)
TENANTS = st.from_regex(f"^{ids.TENANT}$", fullmatch=True)


@given(a=st.tuples(TENANTS, OUTSIDE_IDS), b=st.tuples(TENANTS, OUTSIDE_IDS))
def test_no_two_tenants_ids_name_one_task(a: tuple[str, str], b: tuple[str, str]) -> None:
    """Each tenant names its tasks in a namespace of its own (D52): only the same tenant and id
    give the same task, and a signer's own name for it comes back."""
    same = ids.task_in(*a) == ids.task_in(*b)
    assert same == (a == b)
    for tenant, named in (a, b):
        task_id = ids.task_in(tenant, named)
        assert re.fullmatch(ids.TASK_ID, task_id) and ids.named_by(tenant, task_id) == named


def test_a_signed_event_cannot_name_a_task_in_another_tenants_namespace() -> None:
    assert ids.task_in("globex", "t-1") == "globex.t-1"
    with pytest.raises(ValueError, match="task id"):
        ids.task_in("default", "globex.t-1")  # a `.` is no outside id
    assert isinstance(parse(b'{"event_id":"ev-00000001","kind":"task.run","task_id":"globex.t-1"}'), Refused)
