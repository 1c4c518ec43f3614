"""`wakeful audit --verify` on the real stack (D72): an approved refund's chain of custody proved from
an exported log and the exported public keys, with Redis and Kafka out of reach; an edited record
in the file is named; the same audit straight from Kafka."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from cli_run import doc, wakeful, with_tests_on_path

from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.operate.audit import read as audit_read
from wakeful.operate.client import Client

pytestmark = pytest.mark.timeout(240)

NOWHERE = {"WAKEFUL_REDIS_URL": "redis://127.0.0.1:1/0", "WAKEFUL_KAFKA_BOOTSTRAP": "127.0.0.1:1"}


def offline(*argv: str) -> subprocess.CompletedProcess[str]:
    """The CLI with no Redis and no Kafka it could reach."""
    return subprocess.run(
        [sys.executable, "-m", "wakeful.cli.main", *argv],
        env=with_tests_on_path({**os.environ, **NOWHERE}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _closed_on_log(settings: Settings, task_id: str) -> bool:
    close = f'"message_id":"rt:close:REFUND:{task_id}:v1"'.encode()
    return any(close in m.value for m in audit_read.from_kafka(settings, task_id))


def test_an_approved_refund_verifies_offline_and_an_edited_record_is_named(
    client: Client, shared_fleet: Fleet, settings: Settings, tmp_path: Path
) -> None:
    task_id, _ = client.new_task(2500)
    assert client.approve(task_id, "alice", 1)["status"] == "accepted"
    assert client.wait_settled(task_id, 60)["stage"] == "closed"
    assert wait_until(lambda: _closed_on_log(settings, task_id), 60), "the relay never published the close"
    log, keys = tmp_path / "task.log.jsonl", tmp_path / "keys.json"
    exported = wakeful("log", "export", task_id, "--out", str(log))
    assert exported.returncode == 0, exported.stderr
    assert wakeful("keys", "export", "--out", str(keys)).returncode == 0

    verified = offline("audit", task_id, "--verify", "--log", str(log), "--keys", str(keys), "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    found = doc(verified)
    assert found["verified"] is True and found["problems"] == []
    assert found["started"]["kind"] == "task.create" and found["started"]["verified"] == "ed25519"
    [effect] = found["effects"]
    assert (effect["op_key"], effect["outcome"], effect["args"]["amount"]) == (
        f"REFUND:{task_id}:v1",
        "succeeded",
        2500,
    )
    assert effect["policy"] and effect["tool_catalog"] and effect["fence"] is not None
    assert effect["proposal"]["model"] == "rules" and "tool switch" in effect["proposal"]["checks"]
    approval = effect["approval"]
    assert (approval["approver"], approval["version"], approval["event"]["verified"]) == (
        "alice",
        1,
        "ed25519",
    )

    # One record edited in the file: the refund's outcome said to have failed.
    lines = log.read_bytes().splitlines()
    op = f"{task_id}:op:REFUND:"
    edited = [i for i, line in enumerate(lines) if _edited(line, op) != line]
    assert edited, "no line holds the refund's outcome"
    lines[edited[0]] = _edited(lines[edited[0]], op)
    log.write_bytes(b"\n".join(lines) + b"\n")
    failed = offline("audit", task_id, "--verify", "--log", str(log), "--keys", str(keys), "--json")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    problems = doc(failed)["problems"]
    where = orjson.loads(lines[edited[0]])
    named = [p for p in problems if p["record"].startswith(f"{task_id}:op:REFUND:") and "edited" in p["why"]]
    assert named and named[0]["where"] == f"{where['partition']}:{where['offset']}", problems


def _edited(line: bytes, op: str) -> bytes:
    """The line with the refund's succeeded outcome turned into a failure, in its own record only:
    the relay packs records of other tasks in the same partition into the same message, and theirs
    stay as they were."""
    doc_: dict[str, Any] = orjson.loads(line)
    value: str = doc_["value"]
    if not value.startswith("{"):
        return line
    for record in orjson.loads(value).get("records", []):
        raw = orjson.dumps(record).decode()
        succeeded = '"status":"succeeded"'
        if str(record.get("record_id", "")).startswith(op) and succeeded in raw and raw in value:
            doc_["value"] = value.replace(raw, raw.replace(succeeded, '"status":"failed"', 1), 1)
            return orjson.dumps(doc_)
    return line


def test_an_audit_straight_from_kafka_verifies(
    client: Client, shared_fleet: Fleet, settings: Settings
) -> None:
    task_id, _ = client.new_task(2400)
    assert client.approve(task_id, "alice", 1)["status"] == "accepted"
    assert client.wait_settled(task_id, 60)["stage"] == "closed"
    assert wait_until(lambda: _closed_on_log(settings, task_id), 60), "the relay never published the close"
    shown = wakeful("audit", task_id, "--verify")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "verified: every link holds" in shown.stdout and f"effect REFUND:{task_id}:v1" in shown.stdout


def test_an_export_of_a_task_the_log_does_not_hold_is_refused_and_writes_nothing(
    client: Client, tmp_path: Path
) -> None:
    out = tmp_path / "task.log.jsonl"
    for wrong in ("any text!", "../../etc/passwd", f"t-never-{os.getpid()}"):
        exported = wakeful("log", "export", wrong, "--out", str(out))
        assert exported.returncode != 0, (wrong, exported.stdout)
        assert "Traceback" not in exported.stderr and "task" in exported.stderr, exported.stderr
        assert not out.exists() and list(tmp_path.iterdir()) == [], wrong


def test_an_audit_of_an_empty_export_names_it_instead_of_crashing(client: Client, tmp_path: Path) -> None:
    log, keys = tmp_path / "empty.jsonl", tmp_path / "keys.json"
    log.write_bytes(b"")
    assert wakeful("keys", "export", "--out", str(keys)).returncode == 0
    shown = offline("audit", "t-some-task", "--verify", "--log", str(log), "--keys", str(keys))
    assert shown.returncode == 1 and "Traceback" not in shown.stderr, shown.stderr
    assert "holds no message of task t-some-task" in shown.stdout, shown.stdout
