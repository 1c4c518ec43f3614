"""The broker, not wakeful's code, decides who may write what: checked with clients wakeful did not
write (kcat, and confluent-kafka clients configured by hand from the kafka.json files), against the
local stack that `wakeful dev up` starts. Every refusal is checked on the topic too: what a refused
client sent must not be there when the admin reads it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AclBinding, AdminClient  # type: ignore[attr-defined]  # re-exported
from helpers import kafka_as, kcat, kcat_sasl, topic_marks

from wakeful.core import topics
from wakeful.core.errors import PermissionRefused
from wakeful.core.kafka_rights import ADMIN, RIGHTS, UPSTREAM, Acl, principal
from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.operate.kafka_acl import binding
from wakeful.producers.publish import ConfluentPublisher

ROLES = [role for role in RIGHTS if role != ADMIN]
DEADLINE_S = 20.0


def by_hand(settings: Settings, role: str | None) -> dict[str, Any]:
    """A confluent-kafka configuration built without wakeful: the password read from the file."""
    config: dict[str, Any] = {"bootstrap.servers": settings.kafka_bootstrap, "message.timeout.ms": 5000}
    if role is not None:
        cred = orjson.loads((settings.secrets / role / "kafka.json").read_bytes())
        config |= {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": cred["username"],
            "sasl.password": cred["password"],
        }
    return config


def ends(bootstrap: str, topic: str) -> list[int]:
    """The topic's end offsets, read as the admin."""
    return [tp.offset for tp in topic_marks(bootstrap, topic)]


def produce(config: dict[str, Any], topic: str) -> str | None:
    """Publish one message; None if the broker acknowledged it, else the error it ended with."""
    outcome: list[str | None] = []
    producer = Producer(config)
    producer.produce(
        topic,
        key=b"acl-probe",
        value=b"{}",
        on_delivery=lambda e, _m: outcome.append(e.name() if e else None),
    )
    deadline = time.monotonic() + DEADLINE_S
    while not outcome and time.monotonic() < deadline:
        producer.poll(0.1)
    return outcome[0] if outcome else "no delivery report"


def kcat_publish(bootstrap: str, topic: str, *sasl: str) -> subprocess.CompletedProcess[bytes]:
    return kcat("-P", "-b", bootstrap, *sasl, "-X", "message.timeout.ms=5000", "-t", topic, stdin=b"{}\n")


def test_a_client_without_credentials_cannot_publish_to_any_wakeful_topic(
    settings: Settings, kafka_bootstrap: str
) -> None:
    controller = f"127.0.0.1:{settings.kafka_controller_port}"
    before = {topic: ends(kafka_bootstrap, topic) for topic in topics.ALL}
    tries = [(topic, address) for topic in topics.ALL for address in (kafka_bootstrap, controller)]
    # A refused client gives up only at its message timeout: the tries wait side by side.
    with ThreadPoolExecutor(len(tries) + len(topics.ALL)) as pool:
        sent = {(t, a): pool.submit(kcat_publish, a, t) for t, a in tries}  # neither listener admits one
        produced = {t: pool.submit(produce, by_hand(settings, None), t) for t in topics.ALL}
        for (topic, address), kcat_run in sent.items():
            assert kcat_run.result().returncode != 0, (topic, address, kcat_run.result().stderr)
        for topic, error in produced.items():
            assert error.result() is not None, topic
    for topic in topics.ALL:
        assert ends(kafka_bootstrap, topic) == before[topic], f"an anonymous client wrote to {topic}"


def test_a_wrong_password_is_refused_at_login(settings: Settings, kafka_bootstrap: str) -> None:
    config = by_hand(settings, UPSTREAM) | {"sasl.password": "not-the-password"}
    before = ends(kafka_bootstrap, topics.EVENTS)
    sasl = [*kcat_sasl(UPSTREAM, settings)[:-1], "sasl.password=not-the-password"]
    with ThreadPoolExecutor(2) as pool:  # each ends at its own timeout: side by side
        produced = pool.submit(produce, config, topics.EVENTS)
        listing = pool.submit(kcat, "-L", "-b", kafka_bootstrap, *sasl, "-m", "5").result()
        assert produced.result() is not None
    assert listing.returncode != 0 and b"Authentication failed" in listing.stderr
    assert ends(kafka_bootstrap, topics.EVENTS) == before


# The pairs DESIGN.md section 2 makes most tempting to forge: a wake, a proposal, an event.
FORGERIES = [
    ("proposer", topics.WAKE),
    (UPSTREAM, topics.WAKE),
    ("gate", topics.PROPOSALS),
    ("executor", topics.PROPOSALS_REQUEST),
    ("timer", topics.PROPOSALS),
    ("relay", topics.EVENTS),
    ("inbound", topics.LOG),
]


@pytest.mark.parametrize(("role", "topic"), FORGERIES, ids=[f"{r}->{t}" for r, t in FORGERIES])
def test_a_role_credential_cannot_publish_to_another_roles_output_topic(
    settings: Settings, kafka_bootstrap: str, role: str, topic: str
) -> None:
    before = ends(kafka_bootstrap, topic)
    sent = kcat_publish(kafka_bootstrap, topic, *kcat_sasl(role, settings))
    assert sent.returncode != 0 and b"Topic authorization failed" in sent.stderr, sent.stderr
    assert ends(kafka_bootstrap, topic) == before, f"{role} wrote to {topic}"


def test_every_role_may_write_only_its_own_topics(settings: Settings, kafka_bootstrap: str) -> None:
    for role in ROLES:
        for topic in set(topics.ALL) - set(RIGHTS[role].writes):
            before = ends(kafka_bootstrap, topic)
            assert produce(by_hand(settings, role), topic) == "TOPIC_AUTHORIZATION_FAILED", (role, topic)
            assert ends(kafka_bootstrap, topic) == before, f"{role} wrote to {topic}"
        if topics.DLQ in RIGHTS[role].writes:  # the same credential does work where it may
            assert produce(by_hand(settings, role), topics.DLQ) is None, role


def test_a_role_sees_only_the_topics_it_uses(settings: Settings, kafka_bootstrap: str) -> None:
    for role in ROLES:
        listing = kcat("-L", "-b", kafka_bootstrap, *kcat_sasl(role, settings), "-m", "10")
        assert listing.returncode == 0, listing.stderr
        seen = {t for t in topics.ALL if f'topic "{t}"'.encode() in listing.stdout}
        rights = RIGHTS[role]
        # A topic whose settings alone a role reads (DescribeConfigs) may stay out of its listing.
        used = {*rights.reads, *rights.writes}
        assert used <= seen <= used | set(rights.reads_config), role


def consume_error(config: dict[str, Any], topic: str) -> str | None:
    """Join the group and read: the first error the broker answers with, or None."""
    consumer = Consumer(config | {"auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    deadline = time.monotonic() + DEADLINE_S
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            err = msg.error() if msg is not None else None
            if err is not None and err.code() != KafkaError._PARTITION_EOF:
                return str(err.name())
        return None
    finally:
        consumer.close()


def test_a_role_cannot_join_another_roles_consumer_group(settings: Settings, kafka_bootstrap: str) -> None:
    # The gate may read wakeful.wake, but only as its own group: in the executor's it could take
    # the executor's partitions away, or commit offsets the executor never reached.
    as_gate = by_hand(settings, "gate")
    for group in ("wakeful-executor", "wakeful-inbound", "wakeful-proposer"):
        assert consume_error(as_gate | {"group.id": group}, topics.WAKE) == "GROUP_AUTHORIZATION_FAILED"
    sent = kcat(
        "-C", "-b", kafka_bootstrap, *kcat_sasl("proposer", settings), "-G", "wakeful-gate", topics.WAKE
    )
    assert sent.returncode != 0 or b"Group authorization failed" in sent.stderr, sent.stderr


def test_a_role_cannot_read_a_topic_it_does_not_consume(settings: Settings, kafka_bootstrap: str) -> None:
    as_gate = by_hand(settings, "gate") | {"group.id": "wakeful-gate"}
    assert consume_error(as_gate, topics.PROPOSALS) == "TOPIC_AUTHORIZATION_FAILED"


def wakeful_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wakeful.cli.main", *args],
        env=env or dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_apply_takes_away_a_right_the_table_does_not_grant(settings: Settings, kafka_bootstrap: str) -> None:
    extra = binding(Acl(principal("gate"), "topic", topics.WAKE, "write"))
    admin = AdminClient(kafka_as(kafka_bootstrap))
    for future in admin.create_acls([extra]).values():
        future.result(DEADLINE_S)
    # The controller has it once the future is done; the broker that answers DescribeAcls applies
    # it from the metadata log a moment later.
    assert wait_until(lambda: _allowed(admin, extra), DEADLINE_S), "the extra ACL never showed"
    env = dict(os.environ, WAKEFUL_KAFKA_BOOTSTRAP=kafka_bootstrap)  # as for a cluster of one's own
    applied = wakeful_cli("admin", "kafka-acl", "--apply", env=env)
    assert applied.returncode == 0, applied.stderr
    assert "(1 stale ACLs removed)" in applied.stderr
    assert wait_until(lambda: not _allowed(admin, extra), DEADLINE_S), "the extra ACL was not taken away"


def _allowed(admin: AdminClient, rule: AclBinding) -> bool:
    from confluent_kafka.admin import AclBindingFilter  # type: ignore[attr-defined]  # re-exported

    found = admin.describe_acls(
        AclBindingFilter(
            rule.restype,
            rule.name,
            rule.resource_pattern_type,
            rule.principal,
            rule.host,
            rule.operation,
            rule.permission_type,
        )
    ).result(DEADLINE_S)
    return rule in found


def test_a_role_whose_login_is_refused_stops_at_start_in_one_line(settings: Settings, tmp_path: Path) -> None:
    # Every secret as the stack has it (Redis passwords, keys), but a wrong Kafka password.
    folder = tmp_path / "secrets"
    shutil.copytree(settings.secrets, folder)
    cred = orjson.loads((folder / "gate" / "kafka.json").read_bytes())
    (folder / "gate" / "kafka.json").write_bytes(orjson.dumps(cred | {"password": "not-the-password"}))
    started = wakeful_cli("worker", "gate", env=dict(os.environ, WAKEFUL_SECRETS=str(folder)))
    assert started.returncode != 0
    lines = started.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        f"error: Kafka refused the credentials for role gate in {folder}/gate/kafka.json"
    )


def test_the_publisher_names_a_refused_login(kafka_bootstrap: str) -> None:
    security = kafka_as(kafka_bootstrap, UPSTREAM) | {"sasl.password": "not-the-password"}
    with pytest.raises(PermissionRefused, match="Kafka refused the credentials of wakeful-upstream"):
        ConfluentPublisher(kafka_bootstrap, security=security, connect_timeout=5.0)
