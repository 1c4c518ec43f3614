"""Posting to `wakeful ingress` on the real stack: a webhook signed with curl and openssl (the very
commands docs/ingress.md shows) creates its task, and its sender reads the receipt; a forged,
stale, oversized, malformed or mistyped post gets its precise 4xx and leaves nothing on Kafka or in
Redis; a key over its rate is told when to come back; a receipt answers only the key that sent."""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis
from confluent_kafka import Consumer, Producer
from helpers import free_ports, ingress_door, kafka_as, topic_marks, wait_dead_letter

from wakeful.client import ReadRefused, Upstream
from wakeful.core import topics
from wakeful.core.kafka_rights import UPSTREAM
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client
from wakeful.producers.signing import sign_event
from wakeful.schemas import events, webhook
from wakeful.schemas.events import SignedEvent
from wakeful.state import keys

DOC = Path(__file__).resolve().parents[1] / "docs" / "ingress.md"
SENDER, OTHER = "hooks-billing", "hooks-other"
RATE, BURST = 1.0, 3
START_S, SETTLE_S = 30.0, 60.0
PLAIN = {"Content-Type": "text/plain"}

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def door(client: Client) -> Iterator[str]:
    """`wakeful ingress` with a small per-key allowance, as an operator starts it; its URL."""
    with ingress_door({"WAKEFUL_INGRESS_RATE": str(RATE), "WAKEFUL_INGRESS_BURST": str(BURST)}) as url:
        yield url


@pytest.fixture(scope="module")
def metered_door(client: Client) -> Iterator[tuple[str, str]]:
    """`wakeful ingress` with its metrics port, as docs/metrics.md starts it: (door URL, scrape URL)."""
    (port,) = free_ports(1)
    with ingress_door({"WAKEFUL_INGRESS_METRICS_PORT": str(port)}) as url:
        yield url, f"http://127.0.0.1:{port}/metrics"


@pytest.fixture(scope="module")
def secret(client: Client) -> bytes:
    _, path = client.add_hmac_signer(SENDER, (events.CREATE, events.RUN))
    client.add_hmac_signer(OTHER, (events.RUN,))
    return bytes.fromhex(path.read_text().strip())


def shell_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", DOC.read_text(), re.S)


def run_doc(block: str, **env: str) -> str:
    """A shell block of docs/ingress.md, as a user runs it: bash, curl and openssl."""
    script = block.replace("hmac-billing", f"hmac-{SENDER}").replace("billing.hmac", f"{SENDER}.hmac")
    done = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script],
        env={**os.environ, **env},
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def post(url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(url, content=body, headers=headers, timeout=15)


def hook_headers(
    secret: bytes, body: bytes, t: int | None = None, key: str = f"hmac-{SENDER}"
) -> dict[str, str]:
    t = int(time.time()) if t is None else t
    return {
        "Content-Type": "application/json",
        webhook.KEY_HEADER: key,
        webhook.SIGNATURE_HEADER: webhook.header(secret, t, body),
    }


def test_a_webhook_signed_with_curl_creates_its_task_and_its_sender_reads_the_receipt(
    client: Client, redis_client: redis.Redis, shared_fleet: Fleet, door: str, secret: bytes
) -> None:
    task = f"hook-{uuid.uuid4().hex[:10]}"
    env = {"INGRESS": door, "TASK": task, "WAKEFUL_HOME": str(client.settings.home), "SECRET": secret.hex()}
    send, read = [b for b in shell_blocks() if "curl" in b]
    answer = orjson.loads(run_doc(send, **env))
    assert answer["task_id"] == task and answer["event_id"].startswith("wh-"), answer
    receipt_block = read.replace("EVENT=wh-...", f"EVENT={answer['event_id']}")
    deadline = time.monotonic() + SETTLE_S
    while True:
        receipt = orjson.loads(run_doc(receipt_block, **env))
        if receipt.get("status"):
            break
        assert time.monotonic() < deadline, receipt
        time.sleep(0.2)
    assert receipt["status"] == "accepted" and receipt["task_id"] == task, receipt
    assert redis_client.exists(keys.state(task))  # the task was made from the webhook
    # Only its sender reads it: another key of the same tenant is told there is no receipt.
    target = f"/v1/receipts/{answer['event_id']}?task_id={task}"
    other = client.authority.signer(f"hmac-{OTHER}")
    assert other is not None
    t = int(time.time())
    signed = webhook.header(other[0].material, t, f"GET {target}".encode())
    refused = httpx.get(
        door + target, headers={webhook.KEY_HEADER: f"hmac-{OTHER}", webhook.SIGNATURE_HEADER: signed}
    )
    assert refused.status_code == 404


def test_a_forged_stale_oversized_or_malformed_post_gets_its_4xx_and_nothing_persists(
    redis_client: redis.Redis, kafka_bootstrap: str, door: str, secret: bytes
) -> None:
    marks = topic_marks(kafka_bootstrap, topics.EVENTS)
    hooks = f"{door}/v1/webhooks"
    ids = {name: f"bad-{name}-{uuid.uuid4().hex[:8]}" for name in ("forged", "stale", "kind", "edited")}

    def body(name: str, kind: str = events.RUN) -> bytes:
        return orjson.dumps({"kind": kind, "task_id": "t-none", "event_id": ids[name]})

    json = {"Content-Type": "application/json"}
    edited, forged, wrong = body("edited"), body("forged"), body("kind", events.APPROVE)
    tampered = edited.replace(b"t-none", b"t-else")  # signed as `edited`, sent otherwise
    hour_ago = int(time.time()) - 3600
    big = b"x" * (events.MAX_EVENT_BYTES + 1)
    rows: list[tuple[str, str, bytes, dict[str, str], int, str]] = [
        ("forged", hooks, forged, hook_headers(b"not the secret", forged), 401, "bad_signature"),
        ("stale", hooks, body("stale"), hook_headers(secret, body("stale"), hour_ago), 401, "stale"),
        ("edited", hooks, tampered, hook_headers(secret, edited), 401, "bad_signature"),
        ("kind not allowed", hooks, wrong, hook_headers(secret, wrong), 403, "not_allowed"),
        ("oversized", hooks, big, hook_headers(secret, b"x"), 413, "too_large"),
        ("not json", hooks, b"{nope", hook_headers(secret, b"{nope"), 400, "malformed"),
        ("wrong type", hooks, forged, {**hook_headers(secret, forged), **PLAIN}, 415, "content_type"),
        ("no signature", hooks, forged, json, 401, "unknown_key"),
        ("unknown key", hooks, forged, hook_headers(secret, forged, key="hmac-nobody"), 401, "unknown_key"),
        ("unsigned event", f"{door}/v1/events", forged, json, 400, "malformed"),
    ]
    for name, url, sent, headers, status, code in rows:
        answer = post(url, sent, headers)
        assert (answer.status_code, answer.json()["code"]) == (status, code), (name, answer.text)
    # A good post after them: once it is acknowledged, anything they had published would be there too.
    good = orjson.dumps({"kind": events.RUN, "task_id": "t-none", "event_id": f"good-{uuid.uuid4().hex[:8]}"})
    assert post(hooks, good, hook_headers(secret, good)).status_code == 202
    published = _published_since(kafka_bootstrap, marks)
    assert orjson.loads(good)["event_id"] in published
    assert not set(ids.values()) & published
    for event_id in ids.values():
        assert not redis_client.exists(keys.seen(f"hmac-{SENDER}", event_id))
        assert not redis_client.exists(keys.receipt(event_id, key_id=f"hmac-{SENDER}"))


def test_a_key_over_its_rate_is_answered_429_with_retry_after_and_a_repeat_spends_none_of_it(
    client: Client, door: str, secret: bytes
) -> None:
    principal = f"hooks-rate-{uuid.uuid4().hex[:6]}"
    key_id = client.add_signer(principal, (events.RUN,))
    first = sign_event(client.signer(principal), events.RUN, task_id=f"t-{uuid.uuid4().hex[:8]}")
    answers = [post(f"{door}/v1/events", first.encode(), {"Content-Type": "application/json"})]
    repeats = [
        post(f"{door}/v1/events", first.encode(), {"Content-Type": "application/json"}) for _ in range(3)
    ]
    assert [(a.status_code, a.json().get("repeat")) for a in repeats] == [(202, True)] * 3
    for _ in range(BURST + 1):
        event = sign_event(client.signer(principal), events.RUN, task_id=f"t-{uuid.uuid4().hex[:8]}")
        answers.append(post(f"{door}/v1/events", event.encode(), {"Content-Type": "application/json"}))
    statuses = [a.status_code for a in answers]
    assert statuses[:BURST] == [202] * BURST, statuses
    limited = [a for a in answers if a.status_code == 429]
    assert limited, statuses
    assert int(limited[0].headers["Retry-After"]) >= 1
    assert key_id in limited[0].json()["error"]


def test_a_tenants_keys_together_are_held_to_its_rate_at_the_door_and_no_other_tenants_are(
    client: Client,
) -> None:
    """With a tenant's rate, one tenant's many keys cannot take the door for themselves: its third
    post in a burst of two is answered 429 naming the tenant, whichever key sends it, while another
    tenant's key posts on."""
    tenants = [f"door-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    flooding = [f"{tenants[0]}-k{i}" for i in range(3)]
    for principal in flooding:
        client.add_signer(principal, (events.RUN,), tenant=tenants[0])
    client.add_signer(tenants[1], (events.RUN,), tenant=tenants[1])
    json = {"Content-Type": "application/json"}

    def sent(principal: str) -> httpx.Response:
        event = sign_event(client.signer(principal), events.RUN, task_id=f"t-{uuid.uuid4().hex[:8]}")
        return post(f"{door}/v1/events", event.encode(), json)

    env = {"WAKEFUL_INGRESS_TENANT_RATE": "0.5", "WAKEFUL_INGRESS_TENANT_BURST": "2"}
    with ingress_door(env) as door:
        answers = [sent(principal) for principal in flooding]  # one post per key: each under its own rate
        other = sent(tenants[1])
    assert [a.status_code for a in answers] == [202, 202, 429], [a.text for a in answers]
    assert f"tenant {tenants[0]} is over its rate" in answers[2].json()["error"]
    assert int(answers[2].headers["Retry-After"]) >= 1
    assert other.status_code == 202, other.text


def _published_since(bootstrap: str, marks: Any) -> set[str]:
    """The event ids on wakeful.events from `marks` to each partition's end now."""
    consumer = Consumer(
        kafka_as(bootstrap) | {"group.id": f"probe-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in marks}
    consumer.assign(marks)
    found: set[str] = set()
    left = {p for p, end in ends.items() if end > next(tp.offset for tp in marks if tp.partition == p)}
    deadline = time.monotonic() + 30
    try:
        while left and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            found.add(SignedEvent.decode(msg.value() or b"").event_id)  # only good events got here
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if offset + 1 >= ends[partition]:
                left.discard(partition)
    finally:
        consumer.close()
    assert not left, f"partitions {left} not read to their end"
    return found


def test_a_webhook_record_put_on_kafka_past_the_door_is_verified_by_inbound_all_the_same(
    client: Client, shared_fleet: Fleet, kafka_bootstrap: str, secret: bytes
) -> None:
    """The door is not trusted for being a door: a forged record written straight to wakeful.events
    by any principal that may write it is dead-lettered by inbound with its reason; a good one is
    taken as if it came through the door."""
    since = topic_marks(kafka_bootstrap, topics.DLQ)
    producer = Producer(kafka_as(kafka_bootstrap, UPSTREAM) | {"acks": "all"})
    forged_task, good_task = f"hook-f-{uuid.uuid4().hex[:8]}", f"hook-g-{uuid.uuid4().hex[:8]}"
    t = int(time.time())

    def record(task: str, key: bytes) -> bytes:
        body = orjson.dumps(
            {"kind": events.CREATE, "task_id": task, "payload": {"amount": 5, "currency": "EUR"}}
        )
        return webhook.wrap(f"hmac-{SENDER}", t, [webhook.tag(key, t, body)], body)

    for task, key in ((forged_task, b"a secret of nobody's"), (good_task, secret)):
        producer.produce(topics.EVENTS, key=task.encode(), value=record(task, key))
    assert producer.flush(30) == 0
    letter = wait_dead_letter(kafka_bootstrap, since, forged_task, "inbound")
    assert letter is not None and "bad signature" in letter["reason"], letter
    client.wait_settled(good_task, 60)


def test_an_upstream_client_without_a_kafka_login_sends_through_the_door(
    client: Client, shared_fleet: Fleet, door: str
) -> None:
    principal = f"hooks-http-{uuid.uuid4().hex[:6]}"
    client.add_signer(principal, (events.CREATE,))
    named = f"hook-u-{uuid.uuid4().hex[:8]}"
    with Upstream(client.signer(principal), url=door) as up:
        event = up.send(events.CREATE, {"amount": 5, "currency": "EUR"}, task_id=named)
        assert up.receipt(event, timeout=60)["status"] == "accepted"
        with pytest.raises(ReadRefused, match=r"403: .* may not send task\.run"):
            up.send(events.RUN, task_id=named)


def test_the_doors_public_port_answers_no_metrics_and_its_metrics_port_counts_by_route_template(
    metered_door: tuple[str, str],
) -> None:
    """Anyone who reaches the door (behind the proxy: the internet) gets 404 for /metrics, and for
    every other path that is no route; the metrics port, bound to 127.0.0.1, serves them. A route's
    template labels the count, never the path as sent (the sender's choice)."""
    door, scrape = metered_door
    for path in ("/metrics", "/metrics/", "/v1/metrics"):
        assert httpx.get(f"{door}{path}", timeout=5).status_code == 404, path
    post(f"{door}/v1/webhooks", b"{}", {"Content-Type": "text/plain"})
    httpx.get(f"{door}/v1/tasks/t-{uuid.uuid4().hex}", timeout=5)  # unsigned: 401
    answer = httpx.get(scrape, timeout=5)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    scraped = answer.text
    assert 'wakeful_ingress_requests_total{route="other",status="404"}' in scraped
    assert 'wakeful_ingress_requests_total{route="/v1/webhooks",status="415"}' in scraped
    assert 'wakeful_ingress_requests_total{route="/v1/tasks/{task_id}",status="401"}' in scraped
    assert "wakeful_ingress_seconds_bucket" in scraped
    assert "/v1/tasks/t-" not in scraped
