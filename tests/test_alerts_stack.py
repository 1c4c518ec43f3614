"""The alerts (compose/prometheus/alerts.yml) against what a real fleet serves: every metric a rule
selects is exposed by a role, so no rule can wait on a metric that does not exist; and for the
failures driven here (an approval by someone who is not an approver, an event signed by a key
nobody registered), the series the roles count are ones the authorization alert's selectors pick.
A failed integrity check is counted once, under a reason the integrity alert selects. The rules
on recorded series, without servers: tests/unit/test_alerts.py."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest
from alert_rules import alerts, family, matches, samples, selectors
from confluent_kafka import Producer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from helpers import BankClient, kafka_as, metrics_urls, new_checkpoint, raw_get
from prometheus_client import REGISTRY

from wakeful.core import metrics, topics
from wakeful.core.errors import TamperedState
from wakeful.core.kafka_rights import UPSTREAM
from wakeful.core.settings import Settings
from wakeful.producers.signing import Ed25519Signer, sign_event
from wakeful.schemas import events
from wakeful.state import acl, keys
from wakeful.state.store import Store

AUTHORIZATION = "WakefulRepeatedAuthorizationFailures"
# What this test drives, and the role that counts it: (role, metric) whose series must be picked.
DRIVEN = {
    ("gate", "wakeful_events_refused_total"),
    ("inbound", "wakeful_messages_dead_lettered_total"),
}

OVERDUE = [("within", "=", "overdue")]


def _count(body: str, name: str, matchers: list[tuple[str, str, str]]) -> float:
    return sum(v for n, labels, v in samples(body) if n == name and matches(labels, matchers))


def test_every_metric_an_alert_selects_is_served_and_its_selectors_pick_what_the_roles_count(
    shared_fleet: Any, client: BankClient, settings: Settings
) -> None:
    urls = metrics_urls(shared_fleet)
    picked = {
        (name, tuple(ms))
        for rule in alerts()
        if rule["alert"] == AUTHORIZATION
        for name, ms in selectors(rule["expr"])
    }
    wanted = {(role, name, ms) for role, metric in DRIVEN for name, ms in picked if name == metric}
    assert {(role, name) for role, name, _ in wanted} == DRIVEN, "the alert no longer selects what is driven"
    before = {m: httpx.get(u, timeout=5).text for m, u in urls.items()}

    task_id, created = client.new_task(2500)
    assert created["stage"] == "awaiting_approval"
    assert client.approve(task_id, "mallory", 1)["status"] == "rejected"
    stranger = Ed25519Signer(f"key-alerts-{uuid.uuid4().hex[:8]}", Ed25519PrivateKey.generate())
    unknown = sign_event(stranger, events.CREATE, {"amount": 10}, task_id=f"t-alerts-{uuid.uuid4().hex[:8]}")
    producer = Producer(kafka_as(settings.kafka_bootstrap, UPSTREAM, settings) | {"acks": "all"})
    producer.produce(topics.EVENTS, key=(unknown.task_id or "").encode(), value=unknown.encode())
    assert producer.flush(30) == 0

    deadline = time.monotonic() + 30
    while True:
        after = {m: httpx.get(u, timeout=5).text for m, u in urls.items()}
        still = [
            (role, name, ms)
            for role, name, ms in wanted
            if _count(after[role], name, list(ms)) <= _count(before[role], name, list(ms))
        ]
        # The relay sets its task gauges every REFRESH_S: one just started may not have yet.
        due = any(
            n == "wakeful_waits_due" and matches(labels, OVERDUE) for n, labels, _ in samples(after["relay"])
        )
        if (not still and due) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    counted = {(r, n): [s for s in samples(after[r]) if s[0] == n] for r, n, _ in still}
    assert not still, f"the alert's selectors {still} pick none of what the roles counted: {counted}"

    # Exposed even before a first event: a labelled counter's family has its # TYPE line.
    types = [
        line.split() for body in after.values() for line in body.splitlines() if line.startswith("# TYPE ")
    ]
    served = {t[2] for t in types}
    histograms = frozenset(t[2] for t in types if t[3] == "histogram")
    for rule in alerts():
        missing = {family(name, histograms) for name, _ in selectors(rule["expr"])} - served
        assert not missing, f"{rule['alert']} selects metrics no role serves: {sorted(missing)}"
    assert due, "the relay serves no wakeful_waits_due{within='overdue'}, which the wait alerts select"


def test_a_failed_integrity_check_counts_once_under_a_reason_the_integrity_alert_selects(
    settings: Settings, gate_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "_on", True)  # count in this process, as a role serving metrics does

    def tampered() -> float:
        return REGISTRY.get_sample_value("wakeful_quarantines_total", {"reason": "tampered"}) or 0.0

    before = tampered()
    cp = gate_store.create(new_checkpoint(), f"create-{uuid.uuid4().hex[:8]}").checkpoint
    admin = acl.connect(settings, "admin")
    blob = bytearray(raw_get(admin, keys.state(cp.task_id)))
    blob[-20] ^= 0x01  # a flipped byte inside the ciphertext
    admin.set(keys.state(cp.task_id), bytes(blob))
    with pytest.raises(TamperedState):
        gate_store.load(cp.task_id)
    assert tampered() == before + 1
    gate_store.quarantine(cp.task_id, "tampered", "found again")  # the first reason stands: not counted
    assert tampered() == before + 1
    [rule] = [r for r in alerts() if r["alert"] == "WakefulIntegrityCheckFailed"]
    assert all(matches({"reason": "tampered"}, ms) for _, ms in selectors(rule["expr"]))
