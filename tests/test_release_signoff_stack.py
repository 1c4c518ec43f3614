"""Two owners sign every release, on the real stack (D121). owned_app declares a business and a
security role (sam holds both). Its gate does not start with no sign-off, with one, or with two
from sam alone; it starts once sam (business) and sec (security) signed, a task then runs, and
`wakeful audit` of its step names the release and both sign-offs. A sign-off planted in Redis, or
one signed with a key not registered for release.signoff, counts for nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

import orjson
import pytest
from cli_run import doc, wakeful, with_tests_on_path
from model_server import call, scripted_fleet, task_of
from test_wording_stack import DESK, EGRESS, audited, create

from wakeful.core.settings import Settings
from wakeful.devstack.model_server import Reply, Request
from wakeful.operate.client import Client
from wakeful.schemas import events
from wakeful.state import keys
from wakeful.workflow import release_digest

OWNED = "owned_app:app"
SETTLE_S = 90.0


@pytest.fixture(scope="module")
def client(settings: Settings) -> Client:
    return Client(replace(settings, app=OWNED))


def finish(request: Request) -> Reply:
    return call("finish", {"task_id": task_of(request)})


def gate_refusal() -> str:
    """What a gate of owned_app says when it will not start ("" if it started)."""
    env = with_tests_on_path(dict(os.environ)) | {"WAKEFUL_EGRESS": EGRESS}
    argv = [sys.executable, "-m", "wakeful.cli.main", "worker", "gate", "--app", OWNED, "--allow-second"]
    with subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True) as gate:
        assert gate.stderr is not None
        for line in gate.stderr:  # ends when it exits
            if '"role.start"' in line:  # it passed its start-up checks and runs
                gate.terminate()
                return ""
        gate.wait(60)
    return line  # its last line says why


def sign(role: str, principal: str) -> dict[str, object]:
    signed = wakeful("release", "sign", "--app", OWNED, "--role", role, "--as", principal, "--json")
    assert signed.returncode == 0, signed.stderr
    return doc(signed)


def test_a_release_runs_only_once_two_owners_signed_it_and_the_audit_names_both(client: Client) -> None:
    for principal in ("dana", "sam", "sec"):
        client.add_signer(principal, (events.SIGNOFF,))
    client.add_signer("mallory", (events.APPROVE,))  # a key, but not one that signs releases
    client.add_signer(DESK, (events.CREATE, "fetch.go"))
    from owned_app import app

    digest = release_digest.digest(app)
    admin = client.admin
    admin.hdel(keys.AUTH_RELEASES, *[f"egress:{digest}:{r}:{p}" for r in ("business", "security")
                                     for p in ("dana", "sam", "sec", "mallory")])  # fmt: skip

    said = gate_refusal()
    assert "is not signed by its owners" in said and "role 'business' has not signed" in said, said

    refused = wakeful("release", "sign", "--app", OWNED, "--role", "security", "--as", "mallory")
    assert refused.returncode != 0 and "holds no role 'security'" in refused.stderr, refused.stderr
    planted = {"app": "egress", "digest": digest, "role": "security", "principal": "sec", "key_id": "key-sec",
               "signed_at": "2026-12-07T00:00:00+00:00", "signature": "AAAA"}  # fmt: skip
    admin.hset(keys.AUTH_RELEASES, f"egress:{digest}:security:sec", orjson.dumps(planted))

    assert sign("business", "sam")["missing"], "one sign-off deploys nothing"
    said = gate_refusal()
    assert "role 'security' has not signed" in said and "does not verify" in said, said

    assert sign("security", "sam")["missing"], "two from one principal deploy nothing"
    assert "who signed for another role too" in gate_refusal()

    assert sign("security", "sec")["missing"] == []
    shown = doc(wakeful("release", "show", "--app", OWNED, "--json"))
    assert shown["deployable"] and {
        (s["role"], s["principal"]) for s in shown["signoffs"] if s["counts"]
    } == {("business", "sam"), ("security", "sam"), ("security", "sec")}
    assert gate_refusal() == ""

    with scripted_fleet(finish, OWNED, WAKEFUL_EGRESS=EGRESS):
        task_id = create(client, "fetch")
        assert client.wait_settled(task_id, SETTLE_S)["stage"] == "closed", task_id
        proposal = audited(task_id)["effects"][0][
            "proposal"
        ]  # while its relay runs: it puts the close on the log
    assert proposal["release"] == digest
    assert {(s["role"], s["principal"]) for s in proposal["signoffs"]} >= {
        ("business", "sam"),
        ("security", "sec"),
    }
    text = wakeful("audit", task_id)
    assert f"release {digest[:12]}, signed by" in text.stdout and "sec (security" in text.stdout, text.stdout
