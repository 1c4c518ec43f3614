"""Two owners sign every change of an app's authority, on the real stack (D124). owned_app declares a
business and a security role (sam holds both): `wakeful authority limit set` for it writes nothing
until a principal of each role signed the change's digest, two principals in all; the digest
binds the amount and the limit it replaces, so a sign-off applies once and is no good for a
later change."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from cli_run import doc, wakeful

from wakeful.core.settings import Settings
from wakeful.operate.client import Client
from wakeful.schemas import events

OWNED = "owned_app:app"
APP = "egress"  # owned_app's name
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def client(settings: Settings) -> Client:
    made = Client(replace(settings, app=OWNED))
    for principal in ("sam", "sec"):
        made.add_signer(principal, (events.SIGNOFF,))
    return made


def limit(client: Client) -> int:
    return client.authority.snapshot(app=APP).limit


def set_limit(amount: int) -> tuple[bool, str]:
    run = wakeful("authority", "limit", "set", str(amount), "--app", OWNED)
    return run.returncode == 0, run.stderr + run.stdout


def sign(digest: str, role: str, principal: str) -> list[str]:
    signed = wakeful(
        "release", "sign", "--app", OWNED, "--change", digest, "--role", role, "--as", principal, "--json"
    )
    assert signed.returncode == 0, signed.stderr
    missing: list[str] = doc(signed)["missing"]
    return missing


def test_an_approval_limit_is_set_only_once_two_owners_signed_that_very_change(client: Client) -> None:
    was = limit(client)
    amount = was + 1234
    done, said = set_limit(amount)
    assert not done and "owners have not signed" in said, said
    digest = re.search(r"change ([0-9a-f]{64})", said)
    assert digest is not None, said
    assert limit(client) == was, "an unsigned change was written"

    assert sign(digest[1], "business", "sam"), "one sign-off applies nothing"
    assert not set_limit(amount)[0] and limit(client) == was
    assert sign(digest[1], "security", "sam"), "two from one principal apply nothing"
    assert "who signed for another role too" in set_limit(amount)[1]
    assert sign(digest[1], "security", "sec") == []

    done, said = set_limit(amount)
    assert done and limit(client) == amount, said
    # The same amount again is another change (it replaces `amount` now): signed by nobody.
    again, said = set_limit(was)
    assert not again and limit(client) == amount, said


def test_a_change_nobody_proposed_cannot_be_signed(client: Client) -> None:
    argv = ["release", "sign", "--app", OWNED, "--change", "0" * 64, "--role", "business", "--as", "sam"]
    run = wakeful(*argv)
    assert run.returncode != 0 and "run the command first" in run.stderr, run.stderr


def test_a_rollout_widens_only_as_its_owners_signed_and_rolls_back_without_them(client: Client) -> None:
    spec = "owned_rollout_app:app"

    def release(*argv: str) -> tuple[bool, str]:
        done = wakeful("release", *argv, "--app", spec, "--by", "ops-lead", "--reason", "canary")
        return done.returncode == 0, done.stderr + done.stdout

    wakeful("release", "rollback", "--app", spec, "--by", "ops-lead", "--reason", "a fresh start")
    started, said = release("rollout", "--tenant", "acme")
    assert not started and "owners have not signed" in said, said
    digest = re.search(r"change ([0-9a-f]{64})", said)
    assert digest is not None, said
    for role, principal in (("business", "sam"), ("security", "sec")):
        signed = wakeful(
            "release", "sign", "--app", spec, "--change", digest[1], "--role", role, "--as", principal
        )
        assert signed.returncode == 0, signed.stderr
    started, said = release("rollout", "--tenant", "acme")
    assert started, said
    widened, said = release("rollout", "--tenant", "acme", "--tenant", "globex")
    assert not widened and "owners have not signed" in said, "a sign-off widened a later rollout"
    back, said = release("rollback")
    assert back, said
