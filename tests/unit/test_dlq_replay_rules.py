"""Which dead letter can be replayed how (docs/decisions.md D71), as pure code: an upstream event
goes back through the door (its own bytes while fresh and unmarked, else inside the operator's
wrapper), a runtime message wakes its task, and anything else cannot be replayed, with why. No
Kafka, no Redis, a fixed clock."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from wakeful.producers.signing import Ed25519Signer, sign_event
from wakeful.schemas import events
from wakeful.schemas.events import Envelope, SignedEvent
from wakeful.schemas.logs import DeadLetter
from wakeful.workflow import replays
from wakeful.workflow.replays import Republish, Unreplayable, Wake, Wrap

pytestmark = pytest.mark.timeout(30)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MAX_AGE = timedelta(minutes=5)
CRM = Ed25519Signer("crm-1", Ed25519PrivateKey.generate())
OPERATOR = Ed25519Signer("key-ops-oncall", Ed25519PrivateKey.generate())


def event_text(age: timedelta = timedelta(seconds=10), kind: str = events.CREATE) -> str:
    event = sign_event(CRM, kind, {"amount": 5}, task_id="t-1", event_id="ev-00000001", issued_at=NOW - age)
    return event.encode().decode()


def envelope(kind: str, payload: dict[str, object]) -> str:
    return (
        Envelope(
            message_id="m-1",
            task_id="t-1",
            task_version=0,
            kind=kind,
            created_at=NOW,
            trace_id="m-1",
            payload=payload,
        )
        .encode()
        .decode()
    )


def letter(source: str, raw: str, **more: object) -> DeadLetter:
    return DeadLetter.model_validate({"source": source, "reason": "r", "raw": raw, "at": NOW, **more})


WRAPPER = replays.wrap(OPERATOR, SignedEvent.decode(event_text().encode()), event_text(), "0:7", now=NOW)

# (letter, marked, the plan's type, what its reason or task says)
CASES = [
    ("door, fresh, unmarked", letter("inbound", event_text()), False, Republish, ""),
    ("door, fresh, marked", letter("inbound", event_text()), True, Wrap, ""),
    ("door, past max age", letter("inbound", event_text(timedelta(hours=3))), False, Wrap, ""),
    (
        "door, inside the margin",
        letter("inbound", event_text(MAX_AGE - timedelta(seconds=5))),
        False,
        Wrap,
        "",
    ),
    ("door, not an event", letter("inbound", '{"hello": 1}'), False, Unreplayable, "not a signed event"),
    ("door, not JSON", letter("inbound", "\x00garbage"), False, Unreplayable, "not a signed event"),
    ("door, a wrapper", letter("inbound", WRAPPER.encode().decode()), False, Unreplayable, "itself a replay"),
    (
        "door, too large",
        letter("inbound", "x" * (events.MAX_EVENT_BYTES + 1)),
        False,
        Unreplayable,
        "over the",
    ),
    (
        "not UTF-8",
        letter("inbound", "\ufffd", raw_base64=base64.b64encode(b"\xff\xfe").decode()),
        False,
        Unreplayable,
        "not UTF-8",
    ),
    (
        "a digest",
        letter("inbound", "", digest=True, size=9_000_000, sha256="ab" * 32),
        False,
        Unreplayable,
        "only a digest",
    ),
    (
        "gate, a wake with its event",
        letter("gate", envelope("wake", {"reason": "event", "event": event_text()})),
        True,
        Wrap,
        "",
    ),
    (
        "gate, a wake with no event text",
        letter("gate", envelope("wake", {"reason": "event"})),
        False,
        Unreplayable,
        "holds no event text",
    ),
    ("gate, a deadline wake", letter("gate", envelope("wake", {"reason": "deadline"})), False, Wake, "t-1"),
    ("gate, not a message", letter("gate", "{}"), False, Unreplayable, "not a wakeful message"),
    ("proposer, a request", letter("proposer", envelope("proposal_request", {})), False, Wake, "t-1"),
    ("executor, a proposal", letter("executor", envelope("proposal", {})), False, Wake, "t-1"),
    ("relay, an outbox entry", letter("relay", "{}"), False, Unreplayable, "outbox entry"),
    ("another source", letter("ingress", event_text()), False, Unreplayable, "'ingress'"),
]


@pytest.mark.parametrize(("case", "dead", "marked", "kind", "said"), CASES, ids=[c[0] for c in CASES])
def test_each_letter_is_replayed_by_the_door_it_came_through_or_not_at_all(
    case: str, dead: DeadLetter, marked: bool, kind: type, said: str
) -> None:
    plan = replays.route(replays.subject(dead), NOW, MAX_AGE, marked=marked)
    assert isinstance(plan, kind), (case, plan)
    if isinstance(plan, Unreplayable):
        assert said in plan.reason
    if isinstance(plan, Wake):
        assert plan.task_id == said
    if isinstance(plan, Republish | Wrap):
        assert plan.event.event_id == "ev-00000001"


def test_a_republished_event_is_its_own_bytes_exactly() -> None:
    text = event_text()
    plan = replays.route(replays.subject(letter("inbound", text)), NOW, MAX_AGE, marked=False)
    assert isinstance(plan, Republish) and plan.raw == text


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("0:0", True),
        ("3:12345", True),
        ("0", False),
        ("-1:2", False),
        ("a:b", False),
        ("1:2:3", False),
        ("", False),
    ],
)
def test_letter_ids_are_partition_colon_offset(text: str, ok: bool) -> None:
    if ok:
        assert replays.letter_id(*replays.parse_letter_id(text)) == text
    else:
        with pytest.raises(ValueError, match="not a letter id"):
            replays.parse_letter_id(text)
