"""The CLI drives any app on the real stack: `task new` starts the workflow it names with the fields
given, `task send` publishes a kind the app accepts (and sends nothing for one it does not), a bad
`--app` stops every command in one line before it does anything, and signers carry their tenant."""

from __future__ import annotations

import pytest
from cli_run import doc, wakeful
from contract_app import NOTARY, SIGNED
from helpers import BankClient, topic_marks

from wakeful.core import topics
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import REQUESTER, Client
from wakeful.schemas import events

CONTRACT_APP = "contract_app:app"


def test_task_new_with_a_workflow_and_fields_starts_it_awaiting_approval(
    client: Client, shared_fleet: Fleet
) -> None:
    result = wakeful(
        "task", "new", "--workflow", "refund", "--field", "amount=2500", "--field", "wait_s=600", "--json"
    )
    assert result.returncode == 0, result.stderr
    receipt = doc(result)
    assert (receipt["status"], receipt["stage"], receipt["version"]) == ("accepted", "awaiting_approval", 1)
    shown = client.show(receipt["task_id"])
    assert (shown["workflow"], shown["stage"], shown["amount"]) == ("refund", "awaiting_approval", 2500)
    assert shown["pending_waits"][0]["wait_for"] == "approval"

    listed = wakeful("task", "list")
    row = next(line for line in listed.stdout.splitlines() if line.startswith(receipt["task_id"]))
    assert row.split()[1:4] == ["refund", "awaiting_approval", "v1"], row


def test_task_show_prints_the_waits_and_what_the_apps_own_tool_says_it_did(
    client: BankClient, shared_fleet: Fleet
) -> None:
    task_id, _ = client.new_task(2500)
    waiting = wakeful("task", "show", task_id)
    assert waiting.returncode == 0, waiting.stderr
    [wait] = [line for line in waiting.stdout.splitlines() if line.startswith("waits for: ")]
    assert wait.startswith("waits for: approval of version 1 by ") and "then " in wait, wait
    assert "ledger" not in waiting.stdout  # the refund's bank is the refund's tool's to speak of
    assert client.approve(task_id, "alice", 1)["status"] == "accepted"
    assert client.wait_settled(task_id)["stage"] == "closed"
    [entry] = client.bank.entries(task_id)
    op_key = f"REFUND:{task_id}:v1"
    shown = doc(wakeful("task", "show", task_id, "--json"))
    assert shown["effects"] == {op_key: {"ledger_entry": entry.entry_id}} and "ledger" not in shown
    assert (
        f"effect: {op_key} -> {{'ledger_entry': '{entry.entry_id}'}}"
        in wakeful("task", "show", task_id).stdout
    )


def test_the_refund_shortcuts_keep_working_as_payload_fields(client: Client, shared_fleet: Fleet) -> None:
    result = wakeful("task", "new", "--amount", "300", "--note", "thanks")
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    task_id = line.split()[2]
    assert line == f"accepted: task {task_id} is ready (version 1)"
    assert client.wait_settled(task_id)["amount"] == 300


def test_task_send_publishes_the_kind_given_and_prints_its_receipt(
    client: Client, shared_fleet: Fleet
) -> None:
    task_id, created = client.new_task(2500)
    assert created["stage"] == "awaiting_approval", created
    result = wakeful(
        "task", "send", task_id, "--kind", events.APPROVE, "--field", "version=1", "--as", "alice"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"accepted: {events.APPROVE} accepted; task is ready"), result.stdout
    settled = client.wait_settled(task_id)
    assert settled["stage"] == "closed" and settled["approval"]["approver_ref"] == "alice"


def test_task_cancel_ends_a_waiting_task_whose_approval_then_counts_for_nothing_and_refuses_a_second(
    client: Client, shared_fleet: Fleet
) -> None:
    task_id, created = client.new_task(2500)
    assert created["stage"] == "awaiting_approval", created
    result = wakeful("task", "cancel", task_id, "--reason", "customer withdrew", "--by", REQUESTER)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"task {task_id} is cancelled", result.stdout  # the refund undoes nothing
    shown = client.show(task_id)
    assert shown["pending_waits"] == [] and shown["external_refs"]["cancel-reason"] == "customer withdrew"
    late = client.approve(task_id, "alice", 1)
    assert (late["status"], late["reason"]) == ("rejected", "task is cancelled; it accepts no more events")
    again = wakeful("task", "cancel", task_id, "--reason", "twice", "--by", REQUESTER, "--json")
    assert again.returncode == 1, again.stdout
    assert doc(again)["reason"] == "task is cancelled; it accepts no more events"
    refused = wakeful("task", "cancel", client.new_task(300)[0], "--reason", "x", "--by", "mallory")
    assert refused.returncode == 1 and "mallory" in refused.stdout + refused.stderr, refused


def test_task_send_exits_1_with_the_reason_when_the_event_is_refused(
    client: Client, shared_fleet: Fleet
) -> None:
    task_id, _ = client.new_task(2500)
    result = wakeful(
        "task", "send", task_id, "--kind", events.APPROVE, "--field", "version=1", "--as", "mallory"
    )
    assert result.returncode == 1 and result.stdout.startswith("rejected: "), result.stdout
    assert client.show(task_id)["stage"] == "awaiting_approval"


def test_task_send_of_a_kind_the_app_does_not_know_is_refused_before_anything_is_sent(
    client: Client, kafka_bootstrap: str
) -> None:
    task_id, _ = client.new_task(10)
    before = topic_marks(kafka_bootstrap, topics.EVENTS)
    result = wakeful("task", "send", task_id, "--kind", SIGNED, "--field", "by=notary")
    assert result.returncode == 2, result.stderr
    assert f"app refund accepts no '{SIGNED}' events" in result.stderr
    after = topic_marks(kafka_bootstrap, topics.EVENTS)
    assert [m.offset for m in after] == [m.offset for m in before], "nothing may reach wakeful.events"


@pytest.mark.parametrize(
    "argv",
    [
        ["task", "new", "--amount", "5"],
        ["task", "send", "t-1", "--kind", events.RUN],
        ["task", "show", "t-1"],
        ["task", "list"],
        ["authority", "init"],
        ["authority", "signers", "add", "nobody"],
        ["worker", "all"],
        ["demo"],
        ["bench", "--tasks", "1"],
        ["bench", "--idle", "1"],
        ["chaos", "--tasks", "1"],
    ],
    ids=" ".join,
)
def test_a_bad_app_stops_the_command_in_one_line_before_it_does_anything(
    argv: list[str], client: Client, kafka_bootstrap: str
) -> None:
    before = topic_marks(kafka_bootstrap, topics.EVENTS)
    result = wakeful(*argv, "--app", "not.a:module")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "error: --app: cannot import 'not.a' for app 'not.a:module': No module named 'not'"
    ]
    assert [m.offset for m in topic_marks(kafka_bootstrap, topics.EVENTS)] == [m.offset for m in before]
    assert client.authority.signer("key-nobody") is None


def test_a_signer_added_with_a_tenant_is_read_back_with_it(client: Client, unique: str) -> None:
    principal = f"crm-{unique}"
    result = wakeful(
        "authority", "signers", "add", principal, "--kinds", "task.create,task.run", "--tenant", "acme"
    )
    try:
        assert result.returncode == 0, result.stderr
        found = client.authority.signer(f"key-{principal}")
        assert found is not None
        key, kinds = found
        assert (key.principal, key.tenant, kinds) == (
            principal,
            "acme",
            frozenset({events.CREATE, events.RUN}),
        )
        shown = doc(wakeful("authority", "show", "--json"))["signers"][f"key-{principal}"]
        assert shown["tenant"] == "acme"
    finally:
        client.authority.remove_signer(f"key-{principal}")
        (client.keystore() / f"{principal}.key").unlink(missing_ok=True)


def test_a_signer_for_an_apps_own_kind_is_registered_only_under_that_app(client: Client, unique: str) -> None:
    principal = f"notary-{unique}"
    refused = wakeful("authority", "signers", "add", principal, "--kinds", SIGNED)
    assert refused.returncode == 2 and "unknown event kinds" in refused.stderr, refused.stderr
    assert not (client.keystore() / f"{principal}.key").exists(), "a refused signer leaves no key behind"
    try:
        added = wakeful("authority", "signers", "add", principal, "--kinds", SIGNED, "--app", CONTRACT_APP)
        assert added.returncode == 0, added.stderr
        found = client.authority.signer(f"key-{principal}")
        assert found is not None and found[1] == {SIGNED} and found[0].tenant == "default"
    finally:
        client.authority.remove_signer(f"key-{principal}")
        (client.keystore() / f"{principal}.key").unlink(missing_ok=True)


def test_authority_init_registers_a_signer_for_each_principal_the_apps_workflows_name(client: Client) -> None:
    client.authority.remove_signer(f"key-{NOTARY}")
    result = wakeful("authority", "init", "--app", CONTRACT_APP)
    assert result.returncode == 0, result.stderr
    found = client.authority.signer(f"key-{NOTARY}")
    assert found is not None and found[1] == {SIGNED}
    requester = client.authority.signer(f"key-{REQUESTER}")
    assert requester is not None and events.AMEND in requester[1], (
        "another app's init keeps the refund's kinds"
    )
