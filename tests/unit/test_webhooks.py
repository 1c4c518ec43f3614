"""A webhook (an HMAC over the timestamp and the raw body) travels in a record every role opens the
same way: it verifies only with its own secret over its own bytes, re-encodes to exactly the record
it came in, and is judged by the door's one `judge`. Any bytes give an event or a reason, never an
exception. No Kafka, no Redis, a fixed clock."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.requests import Request
from starlette.responses import JSONResponse

from wakeful.consumers.ingress.events import STATUS, _body, status
from wakeful.producers import reads
from wakeful.schemas import events, webhook
from wakeful.schemas.events import SignedEvent
from wakeful.schemas.signatures import VerifyKey
from wakeful.workflow.door import Accepted, Refused, judge, parse

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T = int(NOW.timestamp())
SECRET = b"whsec-of-the-billing-system"
KEY = VerifyKey("billing-1", "hmac-sha256", SECRET, "system:billing")
OTHER = VerifyKey("billing-1", "hmac-sha256", b"another secret", "system:billing")
ED = VerifyKey("billing-1", "ed25519", bytes(32), "system:billing")
KINDS = frozenset(events.KINDS)
BODY = b'{"kind": "task.create", "task_id": "order-7", "payload": {"amount": 120}}'


def record(body: bytes = BODY, t: int = T, secret: bytes = SECRET, key_id: str = "billing-1") -> bytes:
    return webhook.wrap(key_id, t, [webhook.tag(secret, t, body)], body)


def test_a_webhook_verifies_with_its_own_secret_over_its_raw_bytes_only() -> None:
    event = SignedEvent.decode(record())
    assert (event.kind, event.task_id, event.payload) == ("task.create", "order-7", {"amount": 120})
    assert event.issued_at == NOW and event.key_id == "billing-1"
    assert KEY.verify(event)
    assert not OTHER.verify(event)
    assert not ED.verify(event)  # an Ed25519 key never passes an HMAC tag
    edited = record().replace(b"120", b"990")  # the body in the record, edited: the tag no longer covers it
    assert not KEY.verify(SignedEvent.decode(edited))


def test_an_ed25519_keys_public_bytes_never_serve_as_an_hmac_secret() -> None:
    # Everyone knows every public key: a tag made with one as the secret must verify nowhere.
    public = ED.material
    event = SignedEvent.decode(record(secret=public))
    assert not ED.verify(event)
    header = webhook.parse_header(reads.webhook_header(public, "GET", "/v1/receipts/ev-1", T))
    assert not isinstance(header, str)
    why = reads.verified_webhook(
        ED, key_id="billing-1", signed=header, method="GET", target="/v1/receipts/ev-1", now=NOW
    )
    assert why is not None


def test_a_webhook_event_re_encodes_to_the_very_record_it_came_in() -> None:
    raw = record()
    event = SignedEvent.decode(raw)
    assert event.encode() == raw
    again = SignedEvent.decode(event.encode())
    assert KEY.verify(again) and again.event_id == event.event_id


def test_a_webhook_without_an_event_id_gets_one_from_what_it_signed() -> None:
    first, again = SignedEvent.decode(record()), SignedEvent.decode(record())
    assert first.event_id == again.event_id and first.event_id.startswith("wh-")
    assert SignedEvent.decode(record(t=T + 1)).event_id != first.event_id  # another delivery
    named = b'{"kind": "task.run", "task_id": "order-7", "event_id": "billing-evt-0001"}'
    assert SignedEvent.decode(record(named)).event_id == "billing-evt-0001"


def test_any_of_several_tags_verifies_while_a_secret_is_rotated() -> None:
    tags = [webhook.tag(b"old secret", T, BODY), webhook.tag(SECRET, T, BODY)]
    assert KEY.verify(SignedEvent.decode(webhook.wrap("billing-1", T, tags, BODY)))


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"kind": "task.create", "task_id": "o-1", "signature": "x"}', "fields no event has"),
        (b'{"kind": "task.create", "task_id": "../etc"}', "task_id"),
        (b'{"task_id": "o-1"}', "kind"),
    ],
)
def test_a_webhook_whose_body_names_no_event_is_malformed_with_its_reason(body: bytes, why: str) -> None:
    parsed = parse(record(body))
    assert isinstance(parsed, Refused) and parsed.code == "malformed"
    assert why in parsed.reason


@given(st.binary(max_size=300))
def test_any_bytes_after_the_webhook_prefix_give_a_reason_never_an_exception(tail: bytes) -> None:
    parsed = parse(events.WEBHOOK_PREFIX + tail)
    assert isinstance(parsed, (Refused, SignedEvent))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (f"t={T},v1={'a' * 64}", (T, ["a" * 64])),
        (f" t={T} , v1={'a' * 64},v1={'b' * 64}", (T, ["a" * 64, "b" * 64])),
        (f"t={T},v0={'a' * 64}", None),  # no v1 tag
        (f"t=-1,v1={'a' * 64}", None),
        (f"t=999999999999,v1={'a' * 64}", None),  # a year Python cannot hold
        (f"t={T},v1={'A' * 64}", None),  # lower-case hex only
        (f"t={T},v1={'a' * 63}", None),
        ("", None),
        ("t=1," + ",".join(f"v1={'a' * 64}" for _ in range(5)), None),  # over MAX_TAGS
        ("x" * 600, None),
        (f"t={T - 3600},t={T},v1={'a' * 64}", None),  # two timestamps: the first or the last is no choice
        (f"t={T},v1={'a' * 64},t={T}", None),
        (f"t=-1,t={T},v1={'a' * 64}", None),
    ],
)
def test_the_signature_header_is_read_strictly(value: str, expected: tuple[int, list[str]] | None) -> None:
    parsed = webhook.parse_header(value)
    if expected is None:
        assert isinstance(parsed, str)
    else:
        assert parsed == expected


def test_the_door_judges_a_webhook_like_any_event() -> None:
    event = SignedEvent.decode(record())
    assert isinstance(judge(event, KEY, KINDS, NOW, timedelta(minutes=5), known=KINDS), Accepted)
    stale = SignedEvent.decode(record(t=T - 600))
    refused = judge(stale, KEY, KINDS, NOW, timedelta(minutes=5), known=KINDS)
    assert isinstance(refused, Refused) and refused.code == "stale"
    forged = judge(event, OTHER, KINDS, NOW, timedelta(minutes=5), known=KINDS)
    assert isinstance(forged, Refused) and forged.code == "bad_signature"


@pytest.mark.parametrize(
    ("code", "http"),
    [
        ("malformed", 400),
        ("too_large", 413),
        ("unknown_key", 401),
        ("bad_signature", 401),
        ("stale", 401),
        ("not_allowed", 403),
        ("unknown_kind", 422),
        ("unaddressed", 422),
    ],
)
def test_each_refusal_at_the_http_door_has_its_precise_status(code: str, http: int) -> None:
    assert status(Refused("why", code=code)) == http == STATUS[code]


def test_a_webhook_style_read_is_good_for_its_own_request_only_and_only_now() -> None:
    header = webhook.parse_header(reads.webhook_header(SECRET, "GET", "/v1/receipts/ev-1", T))
    assert not isinstance(header, str)

    def check(key: VerifyKey | None, target: str = "/v1/receipts/ev-1", now: datetime = NOW) -> str | None:
        return reads.verified_webhook(
            key, key_id="billing-1", signed=header, method="GET", target=target, now=now
        )

    assert check(KEY) is None
    assert "bad signature" in (check(KEY, "/v1/receipts/ev-2") or "")
    assert "bad signature" in (check(OTHER) or "")
    assert "Ed25519" in (check(ED) or "")
    assert "unknown key" in (check(None) or "")
    assert "issued" in (check(KEY, now=NOW + timedelta(minutes=5)) or "")


def test_a_signed_event_keeps_its_canonical_form() -> None:
    """Not every event is a webhook: an event that came as itself encodes as itself."""
    doc = {
        "schema_version": 1,
        "event_id": "ev-00000001",
        "kind": "task.run",
        "task_id": "t-1",
        "correlation_id": None,
        "key_id": "k",
        "issued_at": NOW.isoformat(),
        "payload": {},
        "signature": "c2ln",
    }
    event = SignedEvent.decode(orjson.dumps(doc))
    assert event.webhook is None and orjson.loads(event.encode())["signature"] == "c2ln"


@pytest.mark.parametrize("declared", ["\u00b2", "1\u00b9", "-1", " ", "9" * 30])
def test_a_content_length_that_is_no_ascii_number_is_a_413_never_an_exception(declared: str) -> None:
    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/webhooks",
        "headers": [(b"content-length", declared.encode("latin-1"))],
        "query_string": b"",
    }
    answer = asyncio.run(_body(Request(scope, receive)))
    assert isinstance(answer, JSONResponse) and answer.status_code == 413
