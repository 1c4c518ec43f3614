"""A Cedar policy deployed while tasks wait governs new work; a task keeps the version it started
under (gate 4's default rule for policy, pin); a rollback restores the older text; and the history
names who did each. On the real stack, through the CLI as an operator runs it."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_run import wakeful
from helpers import BankClient

from wakeful.devstack.fleet import Fleet
from wakeful.examples.refund import Stage
from wakeful.examples.refund import app as refund_app
from wakeful.state import keys

pytestmark = pytest.mark.timeout(180)

CAP = (
    "\n"
    '@reason("no refund above 1200 in this quarter, got {amount}")\n'
    'forbid (principal, action == Action::"refund", resource)\n'
    "when { context has amount && context.amount > 1200 };\n"
)


@pytest.fixture()
def no_versions(client: BankClient) -> Iterator[None]:
    """The refund app with no policy version deployed, before and after (its own text in force)."""
    names = (keys.auth_policy_index("refund"), keys.auth_policies("refund"))
    client.admin.delete(*names)
    yield
    client.admin.delete(*names)


def _deploy(text: str, by: str, reason: str) -> str:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "refund.cedar"
        path.write_text(text)
        said = wakeful(
            "authority", "policy", "deploy", str(path), "--app", "refund", "--by", by, "--reason", reason
        )
    assert said.returncode == 0, said.stderr
    return said.stderr


def _approved(client: BankClient, amount: int) -> str:
    task_id, _ = client.new_task(amount)
    client.wait_stage(task_id, {Stage.AWAITING_APPROVAL})
    return task_id


def test_a_policy_deployed_while_tasks_wait_governs_new_work_and_pinned_tasks_keep_theirs(
    client: BankClient, shared_fleet: Fleet, no_versions: None
) -> None:
    assert "policy-refund-v1 deployed" in _deploy(refund_app.policy, "alice", "the bundled rules")
    old = _approved(client, 1500)  # asleep, awaiting approval, stamped v1
    assert client.show(old)["versions"]["policy"] == "policy-refund-v1"

    assert "policy-refund-v2" in _deploy(refund_app.policy + CAP, "bob", "cap refunds at 1200")
    new = _approved(client, 1500)
    assert client.show(new)["versions"]["policy"] == "policy-refund-v2"
    client.approve(new, "alice", 1)
    client.approve(old, "alice", 1)
    refused = client.wait_stage(new, {Stage.NEEDS_REVIEW, Stage.CLOSED})
    assert refused["stage"] == Stage.NEEDS_REVIEW and refused["ledger"] == [], refused
    assert refused["last_refusal"] == "no refund above 1200 in this quarter, got 1500", refused
    pinned = client.wait_stage(old, {Stage.NEEDS_REVIEW, Stage.CLOSED})
    assert pinned["stage"] == Stage.CLOSED and len(pinned["ledger"]) == 1, pinned  # judged by v1's text
    assert pinned["versions"]["policy"] == "policy-refund-v1"

    back = wakeful("authority", "policy", "rollback", "--app", "refund", "--by", "carol")
    assert back.returncode == 0 and "policy-refund-v3 deployed: rollback to v1" in back.stderr, back.stderr
    after = _approved(client, 1500)
    client.approve(after, "alice", 1)
    done = client.wait_stage(after, {Stage.NEEDS_REVIEW, Stage.CLOSED})
    assert done["stage"] == Stage.CLOSED and len(done["ledger"]) == 1, done
    assert done["versions"]["policy"] == "policy-refund-v3"

    listed = wakeful("authority", "policy", "list", "--app", "refund", "--json")
    history = [(v["version"], v["by"], v["reason"]) for v in json.loads(listed.stdout)]
    assert history == [
        (1, "alice", "the bundled rules"),
        (2, "bob", "cap refunds at 1200"),
        (3, "carol", "rollback to v1"),
    ]
    human = wakeful("authority", "policy", "list", "--app", "refund").stdout.splitlines()
    assert [line.split()[0] for line in human] == ["v1", "v2", "v3"]
    assert "by bob  (cap refunds at 1200)" in human[1] and "by carol  (rollback to v1)" in human[2], human
    shown = wakeful("authority", "policy", "show", "3", "--app", "refund", "--json")
    assert json.loads(shown.stdout)["text"] == refund_app.policy
    again = wakeful(
        "authority", "policy", "rollback", "--app", "refund", "--by", "dave", "--to", "2", "--reason", "cap"
    )
    assert again.returncode == 0 and "policy-refund-v4 deployed: cap" in again.stderr, again.stderr
    in_force = wakeful("authority", "policy", "show", "--app", "refund")
    assert in_force.stdout.startswith("# v4 ") and "by dave  (cap)" in in_force.stdout, in_force.stdout
    assert in_force.stdout.endswith(refund_app.policy + CAP + "\n")
    capped = _approved(client, 1500)
    client.approve(capped, "alice", 1)
    assert client.wait_stage(capped, {Stage.NEEDS_REVIEW, Stage.CLOSED})["stage"] == Stage.NEEDS_REVIEW


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (
            "permit (principal, action, resource) when { 1 + };\nforbid (principal action, resource);\n",
            ["line 1: unexpected token", "line 2: unexpected token"],
        ),
        (
            "permit (principal, action, resource);\n"
            'forbid (principal, action, resource) when { resource.colour == "x" };',
            ["line 2: attribute `colour` on entity type `Task` not found"],
        ),
    ],
)
def test_a_policy_that_does_not_parse_or_names_what_the_app_lacks_is_refused_whole_and_nothing_is_stored(
    client: BankClient, no_versions: None, text: str, named: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bad.cedar"
        path.write_text(text)
        said = wakeful("authority", "policy", "deploy", str(path), "--app", "refund", "--by", "alice")
    assert said.returncode != 0 and all(n in said.stderr for n in named), said.stderr
    assert wakeful("authority", "policy", "list", "--app", "refund", "--json").stdout.strip() == "[]"


def test_an_apps_approvers_are_its_policys_group_and_change_live_for_that_app_alone(
    client: BankClient, shared_fleet: Fleet
) -> None:
    first, second = _approved(client, 1500), _approved(client, 1500)
    try:
        said = wakeful("authority", "approvers", "add", "mallory", "--app", "refund")
        assert said.returncode == 0 and "mallory is an approver of app refund" in said.stderr, said.stderr
        others = wakeful("authority", "approvers", "list", "--app", "supplier_onboarding", "--json")
        assert "mallory" not in json.loads(others.stdout)
        assert client.approve(first, "mallory", 1)["status"] == "accepted"
        assert client.wait_stage(first, {Stage.CLOSED})["stage"] == Stage.CLOSED
        said = wakeful("authority", "approvers", "remove", "mallory", "--app", "refund")
        assert said.returncode == 0 and "no longer an approver of app refund" in said.stderr, said.stderr
        refused = client.approve(second, "mallory", 1)
        assert refused["status"] == "rejected" and refused["reason"] == "not an authorised approver", refused
        said = wakeful("authority", "limit", "set", "2000", "--app", "refund")
        assert said.returncode == 0 and "app refund's approval limit is 2000" in said.stderr, said.stderr
        within, _ = client.new_task(1500)  # the policy's resource.app.limit, live: no approval asked
        done = client.wait_stage(within, {Stage.CLOSED, Stage.AWAITING_APPROVAL})
        assert done["stage"] == Stage.CLOSED and len(done["ledger"]) == 1, done
    finally:
        client.reset_authority()
