"""The Kafka client libraries' own log lines come out as wakeful's structured records, at the level
WAKEFUL_LOG_LEVEL sets, and never in librdkafka's raw `%N|...` format.

Each case runs a real client in a child process, pointed at a port on 127.0.0.1 that is bound but
not listening (every connection attempt is refused), and reads everything the child wrote to stderr.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

RAW_LIBRDKAFKA = re.compile(rb"^%\d+\|", re.MULTILINE)

# wakeful's own producer, one message, polled until its delivery report says it timed out.
# group.id and debug make librdkafka log a warning (CONFWARN) and debug lines besides the errors.
PRODUCER = """
import time
from confluent_kafka import Producer
from wakeful.consumers.kafka.producing import producer_config
from wakeful.core.settings import Settings

extra = {"message.timeout.ms": 1500, "group.id": "not-for-producers", "debug": "broker"}
producer = Producer(producer_config(Settings.from_env(), "upstream") | extra)
outcome = []
producer.produce("wakeful.events", b"x", on_delivery=lambda err, msg: outcome.append(str(err)))
deadline = time.monotonic() + 30
while not outcome and time.monotonic() < deadline:
    producer.poll(0.1)
producer.flush(5)
print(outcome[0] if outcome else "no delivery report within 30s")
"""

PUBLISHERS = """
import sys
from wakeful.core.errors import ServerUnavailable
from wakeful.producers.publish import ConfluentPublisher, KafkaPythonPublisher

for publisher in (ConfluentPublisher, KafkaPythonPublisher):
    try:
        publisher(sys.argv[1], connect_timeout=1.5)
    except ServerUnavailable as exc:
        print(type(exc).__name__)
"""


@pytest.fixture()
def refused() -> Iterator[str]:
    """host:port of a socket that is bound and never listens: the port stays ours, connects fail."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def run(code: str, bootstrap: str, level: str | None = None) -> tuple[str, list[dict[str, Any]]]:
    """Runs `code` in a child; returns its stdout and its stderr lines, each parsed as a JSON object
    (a line that is not one fails the test)."""
    env = {k: v for k, v in os.environ.items() if k != "WAKEFUL_LOG_LEVEL"}
    env["WAKEFUL_KAFKA_BOOTSTRAP"] = bootstrap
    if level is not None:
        env["WAKEFUL_LOG_LEVEL"] = level
    child = subprocess.run(
        [sys.executable, "-c", code, bootstrap], env=env, capture_output=True, timeout=90, check=True
    )
    assert not RAW_LIBRDKAFKA.search(child.stderr), child.stderr.decode(errors="replace")[:2000]
    records = []
    for line in child.stderr.splitlines():
        record = orjson.loads(line)  # raises on anything that is not wakeful's structured output
        assert isinstance(record, dict)
        records.append(record)
    return child.stdout.decode(), records


def client_lines(records: list[dict[str, Any]], library: str) -> list[dict[str, Any]]:
    return [r for r in records if r["event"] == "kafka.log" and r["library"] == library]


def test_librdkafka_lines_come_out_as_structured_records_never_raw(refused: str) -> None:
    outcome, records = run(PRODUCER, refused)

    assert "Message timed out" in outcome  # the producer really ran until its message failed
    lines = client_lines(records, "librdkafka")
    refusals = [r for r in lines if r["facility"] == "FAIL" and "Connection refused" in r["message"]]
    assert refusals, lines
    first = refusals[0]
    assert first["level"] == "error"  # librdkafka's LOG_ERR (3)
    assert first["client"].startswith("rdkafka#producer-")
    assert first["thread"] == f"sasl_plaintext://{refused}/bootstrap"  # wakeful clients log in by SASL
    assert not first["message"].startswith("[thrd:")
    assert isinstance(first["ts"], float)
    confwarn = [r for r in lines if r["facility"] == "CONFWARN"]
    assert confwarn and {r["level"] for r in confwarn} == {"warning"}  # LOG_WARNING (4)


@pytest.mark.parametrize(
    ("level", "shown"),
    [
        ("error", {"error"}),
        ("warning", {"error", "warning"}),
        ("debug", {"error", "warning", "debug"}),
    ],
)
def test_log_level_decides_which_client_lines_are_written(refused: str, level: str, shown: set[str]) -> None:
    outcome, records = run(PRODUCER, refused, level)

    assert "Message timed out" in outcome
    levels = {r["level"] for r in client_lines(records, "librdkafka")}
    assert shown <= levels
    rank = {"critical": 4, "error": 3, "warning": 2, "info": 1, "debug": 0}
    assert all(rank[seen] >= rank[level] for seen in levels), levels  # nothing below the level


def test_publisher_sdk_lines_come_out_as_structured_records_never_raw(refused: str) -> None:
    outcome, records = run(PUBLISHERS, refused)

    assert outcome.split() == ["ServerUnavailable", "ServerUnavailable"]
    confluent = client_lines(records, "librdkafka")
    assert any(r["level"] == "error" and "Connection refused" in r["message"] for r in confluent), records
    pure = client_lines(records, "kafka-python")
    assert pure and {r["level"] for r in pure} <= {"error", "warning"}, pure
    assert any(r["facility"].startswith("kafka.") and "ECONNREFUSED" in r["message"] for r in pure), pure


def test_kafka_python_debug_lines_are_never_written_they_print_event_bodies(refused: str) -> None:
    _, records = run(PUBLISHERS, refused, "debug")

    levels = {r["level"] for r in client_lines(records, "kafka-python")}
    assert "info" in levels  # lowering the level does show more of kafka-python's lines ...
    assert "debug" not in levels  # ... but never its request dumps
