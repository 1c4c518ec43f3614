"""Which dead letters a bulk replay takes (`wakeful dlq replay --code C --since T`), as pure code: a
letter's code read from its reason (the door's own code for the door's reasons, the metric's class
for any other), and a window [since, until) of when wakeful.dlq took it. Real signatures for the
door's refusals; no Kafka, no Redis, a fixed clock."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from wakeful.core.metrics_pure import REASONS
from wakeful.examples.refund import app as refund_app
from wakeful.operate.dlq import codes as letter_codes
from wakeful.operate.dlq.bulk import Summary, code_of, select
from wakeful.operate.dlq.read import Letter
from wakeful.producers.keys import public_bytes
from wakeful.producers.signing import Ed25519Signer, sign_event
from wakeful.schemas import events
from wakeful.schemas.events import SignedEvent
from wakeful.schemas.logs import DeadLetter
from wakeful.schemas.signatures import VerifyKey
from wakeful.workflow import replays
from wakeful.workflow.door import CODES, Refused, judge, judge_replay, parse

pytestmark = pytest.mark.timeout(30)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MAX_AGE = timedelta(minutes=5)
CRM = Ed25519Signer("key-crm", Ed25519PrivateKey.generate())
CRM_KEY = VerifyKey("key-crm", "ed25519", public_bytes(CRM), "svc-crm")
OPS = Ed25519Signer("key-ops", Ed25519PrivateKey.generate())
OPS_KEY = VerifyKey("key-ops", "ed25519", public_bytes(OPS), "ops-oncall")
OTHER_OPS_KEY = VerifyKey("key-ops", "ed25519", public_bytes(OPS), "ops-oncall", "globex")
ALL = frozenset(events.KINDS)
KNOWN_KINDS = refund_app.kinds


def event(kind: str = events.CREATE, issued: datetime = NOW, task: str | None = "t-1") -> SignedEvent:
    return sign_event(CRM, kind, {"amount": 1}, task_id=task, event_id="ev-00000001", issued_at=issued)


def judged(sent: SignedEvent, key: VerifyKey | None = CRM_KEY, kinds: frozenset[str] = ALL) -> Refused:
    found = judge(sent, key, kinds, NOW, MAX_AGE, known=KNOWN_KINDS)
    assert isinstance(found, Refused), found
    return found


def replayed(inner: SignedEvent, key: VerifyKey = OPS_KEY, inner_kinds: frozenset[str] = ALL) -> Refused:
    wrapper = replays.wrap(OPS, inner, inner.encode().decode(), "0:42", now=NOW)
    found = judge_replay(
        wrapper,
        key,
        frozenset({events.REPLAY}),
        (CRM_KEY, inner_kinds),
        now=NOW,
        max_age=MAX_AGE,
        known=KNOWN_KINDS,
    )
    assert isinstance(found, Refused), found
    return found


def parsed(raw: bytes) -> Refused:
    found = parse(raw)
    assert isinstance(found, Refused), found
    return found


STALE = NOW - timedelta(hours=6)
# Each refusal as the door itself makes it: the code read back from its reason must be its own.
DOOR_REFUSALS: dict[str, Callable[[], Refused]] = {
    "malformed": lambda: parsed(b"not json"),
    "too_large": lambda: parsed(b"x" * (events.MAX_EVENT_BYTES + 1)),
    "unknown_key": lambda: judged(event(), key=None),
    "bad_signature": lambda: judged(event().model_copy(update={"payload": {"amount": 900}})),
    "stale: too old": lambda: judged(event(issued=STALE)),
    "stale: from the future": lambda: judged(event(issued=NOW + timedelta(hours=1))),
    "unknown_kind": lambda: judged(event(kind="no.such.kind")),
    "not_allowed": lambda: judged(event(), kinds=frozenset({events.APPROVE})),
    "unaddressed: no task": lambda: judged(event(task=None)),
    "unaddressed: approval": lambda: judged(event(kind=events.APPROVE, task=None)),
    "replay: inner not allowed": lambda: replayed(event(issued=STALE), inner_kinds=frozenset({events.AMEND})),
    "replay: inner forged": lambda: replayed(event().model_copy(update={"payload": {"amount": 9}})),
    "replay: another tenant": lambda: replayed(event(issued=STALE), key=OTHER_OPS_KEY),
}


@pytest.mark.parametrize("made", DOOR_REFUSALS.values(), ids=DOOR_REFUSALS.keys())
def test_a_door_letter_has_the_code_the_door_gave_its_refusal(made: Callable[[], Refused]) -> None:
    refused = made()
    assert letter_codes.code("inbound", refused.reason) == refused.code


def test_every_door_code_but_inbounds_own_is_made_by_the_door_above() -> None:
    made = {made().code for made in DOOR_REFUSALS.values()}
    assert made == set(CODES) - {"duplicate", "unknown_wait"}  # inbound's, written below


# Reasons as the roles write them, and the code a letter with them has.
LETTERS = [
    ("inbound", "duplicate event ev-1 from key k-1", "duplicate"),
    ("inbound", "unknown correlation id 'c-7'", "unknown_wait"),
    ("inbound", "replay of letter 0:17 by ops-oncall: unknown correlation id 'c-7'", "unknown_wait"),
    ("inbound", "malformed replay: a replay's `letter` is <partition>:<offset>", "malformed"),
    ("inbound", "inbound failed on this message: KeyError('x')", "poison"),  # the runner's, not the door's
    ("gate", "event is too old: issued 2026-01-01T00:00:00+00:00, max age 300s", "stale"),
    ("gate", "wake carries an event whose signature does not verify (k-2)", "bad_signature"),
    ("gate", "no task acme.t-9", "unknown_task"),
    ("gate", "unknown correlation id 'c-7'", "unknown_task"),  # the door's code is the door's only
    ("executor", "proposal refused: task t-1 is quarantined: tampered", "quarantined"),
    ("executor", "proposal refused: gate 4: tool catalog v3 is not the task's", "refused"),
    ("relay", "something nobody wrote a class for", "other"),
    (None, "not a dead letter: Expecting value", "other"),
]


@pytest.mark.parametrize(("source", "reason", "expected"), LETTERS)
def test_a_letters_code_is_read_from_its_reason_by_the_role_that_wrote_it(
    source: str | None, reason: str, expected: str
) -> None:
    assert letter_codes.code(source, reason) == expected
    assert expected in letter_codes.KNOWN


def test_the_codes_are_the_doors_and_the_metrics_classes_and_no_other() -> None:
    assert set(letter_codes.KNOWN) == set(CODES) | set(REASONS)
    assert letter_codes.known("stale") == "stale"
    with pytest.raises(ValueError, match="'stal' is no letter code: use one of malformed, too_large"):
        letter_codes.known("stal")


SINCE, UNTIL = NOW - timedelta(hours=2), NOW - timedelta(hours=1)
TAKEN = [
    ("stale", SINCE, "stale", True),  # since is in the window
    ("stale", UNTIL - timedelta(microseconds=1), "stale", True),
    ("stale", UNTIL, "stale", False),  # until is not
    ("stale", SINCE - timedelta(microseconds=1), "stale", False),
    ("stale", SINCE + timedelta(minutes=5), "unknown_key", False),  # another code
    ("stale", None, "stale", False),  # no time on the topic: no window holds it
]


@pytest.mark.parametrize(("wanted", "written", "code", "expected"), TAKEN)
def test_a_bulk_replay_takes_letters_of_its_code_written_in_since_until(
    wanted: str, written: datetime | None, code: str, expected: bool
) -> None:
    assert letter_codes.taken(wanted, (SINCE, UNTIL), written, code) is expected


WINDOWS = [
    (SINCE, UNTIL, (SINCE, UNTIL), ""),
    (SINCE, None, (SINCE, NOW), ""),  # until defaults to now
    (UNTIL, SINCE, None, "is not before --until"),
    (SINCE, SINCE, None, "is not before --until"),  # an empty window is a mistake, said
    (NOW + timedelta(minutes=1), None, None, "is not before --until now"),
]


@pytest.mark.parametrize(("since", "until", "expected", "said"), WINDOWS)
def test_a_window_runs_from_since_to_until_or_now_and_is_never_empty(
    since: datetime, until: datetime | None, expected: tuple[datetime, datetime] | None, said: str
) -> None:
    if expected is None:
        with pytest.raises(ValueError, match=said):
            letter_codes.window(since, until, NOW)
    else:
        assert letter_codes.window(since, until, NOW) == expected


def letter(offset: int, source: str, reason: str, written: datetime | None) -> Letter:
    dead = DeadLetter(source=source, reason=reason, raw="{}", at=NOW)
    return Letter(0, offset, written, dead)


def test_select_keeps_the_topics_order_and_takes_only_the_code_in_the_window() -> None:
    inside = SINCE + timedelta(minutes=10)
    letters = [
        letter(1, "inbound", "event is too old: issued x, max age 300s", inside),
        letter(2, "inbound", "unknown key id 'k'", inside),
        letter(3, "gate", "wake judged at x but appended at y: no verdict the door can have given", inside),
        letter(7, "gate", "wake judged at x is outside the backlog the gate accepts", inside),  # before D84
        letter(4, "inbound", "event is too old: issued x, max age 300s", UNTIL),
        letter(5, "inbound", "event is from the future: issued x", SINCE),
        Letter(0, 6, inside, None, "not a dead letter: x"),
    ]
    assert [x.id for x in select(letters, "stale", (SINCE, UNTIL))] == ["0:1", "0:3", "0:7", "0:5"]
    assert code_of(letters[-1]) == "other"


SUMMARIES = [
    ([], [], True),
    ([{"letter": "0:1", "why": "replayed already", "done": "yes"}], [], True),
    ([{"letter": "0:1", "why": "its signer is not registered", "done": "no"}], [], False),
    ([], [{"letter": "0:1", "why": "wakeful.events refused it"}], False),
]


@pytest.mark.parametrize(("skipped", "failed", "done"), SUMMARIES)
def test_a_bulk_run_is_done_only_when_no_letter_is_left_to_replay(
    skipped: list[dict[str, str]], failed: list[dict[str, str]], done: bool
) -> None:
    summary = Summary("stale", SINCE, UNTIL, False, 1, skipped=skipped, failed=failed)
    assert summary.all_done is done
