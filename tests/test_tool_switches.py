"""Tools as authority data (D57), on the real stack with the session's fleet: a tool an operator
disables while a task runs parks that task in needs_review before its step's intent is written,
with a receipt that names the switch; enabling the tool and reopening the task finishes it with
exactly one effect. A step whose intent was written before the switch completes, once. The switches
and their history are written by the admin only, each change recorded with who, when and why."""

from __future__ import annotations

import dataclasses
import uuid

import orjson
import pytest
import redis
from change_doc import kill_path_command
from cli_run import doc, wakeful
from helpers import BankClient

from wakeful.authority.tool_store import ToolStore
from wakeful.cli.preflight import publish_tools
from wakeful.consumers.kafka import wiring
from wakeful.core.errors import ConfigError
from wakeful.devstack.fleet import Fleet
from wakeful.examples.onboarding import app as onboarding
from wakeful.examples.refund import Stage
from wakeful.examples.refund import app as refund_app
from wakeful.operate.client import DEPLOYER
from wakeful.schemas.logs import ActionStatus
from wakeful.state import acl, keys

UNDER_LIMIT = 300  # ready for its refund at once
TOOL = "refund"


def ready_task(client: BankClient) -> str:
    """A task ready for its refund; with the executor stopped, its proposal waits in Kafka."""
    task_id, receipt = client.new_task(UNDER_LIMIT)
    assert (receipt["status"], receipt["stage"]) == ("accepted", Stage.READY), receipt
    return task_id


def test_a_tool_disabled_mid_run_parks_its_task_with_a_receipt_and_reopening_after_enable_books_once(
    client: BankClient, shared_fleet: Fleet
) -> None:
    refused = wakeful("tools", "disable", TOOL, "--reason", "not mine to stop", "--by", "mallory")
    assert refused.returncode == 2 and "'mallory' is not an operator" in refused.stderr, refused.stderr
    assert client.tools.switch("refund", TOOL) is None
    published = wakeful(*kill_path_command("tools", "publish"))
    assert published.returncode == 0 and "tool catalog" in published.stderr, published.stderr
    shared_fleet.stop_role("executor")
    try:
        task_id = ready_task(client)
        disabled = wakeful(*kill_path_command("tools", "disable"))
        assert disabled.returncode == 0, disabled.stderr
    finally:
        shared_fleet.start_role("executor")
    parked = client.wait_settled(task_id, 60)
    assert parked["stage"] == Stage.NEEDS_REVIEW, parked
    for said in (
        f"tool {TOOL} of app refund is disabled",
        "ops-lead",
        "bank outage INC-7",
        "nothing was called",
    ):
        assert said in parked["last_refusal"], parked["last_refusal"]
    assert parked["actions"] == {} and client.bank.entries(task_id) == [], "an intent or a booking was made"
    listed = doc(wakeful(*kill_path_command("tools", "list"), "--json"))
    [row] = [t for t in listed["tools"] if t["name"] == TOOL]
    assert not row["enabled"] and row["switch"]["by"] == "ops-lead"

    # A reopen while the tool is still off parks the task again, naming the switch: nothing runs.
    assert client.reopen(task_id)["status"] == "accepted"
    again = client.wait_settled(task_id, 60)
    assert again["stage"] == Stage.NEEDS_REVIEW and "bank outage INC-7" in again["last_refusal"], again
    assert again["state_version"] > parked["state_version"] and client.bank.entries(task_id) == []

    enabled = wakeful(*kill_path_command("tools", "enable"))
    assert enabled.returncode == 0, enabled.stderr
    reopened = wakeful(*kill_path_command("task", "reopen", task_id=task_id), "--json")
    assert reopened.returncode == 0 and doc(reopened)["stage"] == Stage.READY, (
        reopened.stdout + reopened.stderr
    )
    done = client.wait_settled(task_id, 60)
    assert done["stage"] == Stage.CLOSED, done
    assert [e["op_key"] for e in done["ledger"]] == [f"REFUND:{task_id}:v1"]
    assert len(client.bank.entries(task_id)) == 1
    history: list[dict[str, str]] = orjson.loads(
        wakeful(*kill_path_command("tools", "history"), "--json").stdout
    )
    assert [(r["action"], r["by"], r["reason"]) for r in history[-2:]] == [
        ("disable", "ops-lead", "bank outage INC-7"),
        ("enable", "ops-lead", "bank back"),
    ]


def test_a_step_whose_intent_was_written_before_the_switch_completes_once(
    client: BankClient, shared_fleet: Fleet
) -> None:
    shared_fleet.stop_role("executor")
    try:
        task_id = ready_task(client)
        # What an executor that died after the intent (crash case B) leaves: the step has begun.
        cp = client.store.load(task_id)
        op = refund_app.tools_at(cp.stage)[0].key_for(task_id, cp.business.version)
        leases, actions = (
            wiring.leases_for(client.settings, "executor"),
            wiring.actions_for(client.settings, "executor"),
        )
        lease = leases.acquire(task_id)
        actions.begin(task_id, op, lease.fence, lease.token, tool=TOOL, args={})
        leases.release(lease)
        client.tools.disable("refund", TOOL, by="ops-lead", reason="after the intent", known={TOOL})
    finally:
        shared_fleet.start_role("executor")
    try:
        done = client.wait_settled(task_id, 60)
        assert done["stage"] == Stage.CLOSED, done
        entry = actions.lookup(task_id, op)
        assert entry is not None and entry.status is ActionStatus.SUCCEEDED
        assert len(client.bank.entries(task_id)) == 1
    finally:
        client.tools.enable("refund", TOOL, by="ops-lead", reason="test over", known={TOOL})


def test_switches_are_recorded_and_only_the_admin_writes_them(client: BankClient) -> None:
    app = f"switch-test-{uuid.uuid4().hex[:8]}"
    tools = client.tools
    with pytest.raises(ConfigError, match=r"has no tool 'nope'; its tools: lookup, pay"):
        tools.disable(app, "nope", by="ops-lead", reason="r", known={"pay", "lookup"})
    first = tools.disable(app, "pay", by="ops-lead", reason="supplier fraud", known={"pay"})
    assert first is not None and tools.switch(app, "pay") == first
    assert tools.disable(app, "pay", by="bob", reason="again", known={"pay"}) is None  # the first stands
    assert client.authority.snapshot().tool_switch(app, "pay") == first  # as every role reads it
    executor = ToolStore(acl.connect(client.settings, "executor"))
    assert executor.switch(app, "pay") == first
    with pytest.raises(redis.exceptions.NoPermissionError):
        executor.enable(app, "pay", by="executor", reason="", known={"pay"})
    assert tools.enable(app, "pay", by="alice", reason="cleared", known={"pay"}) == first
    assert tools.enable(app, "pay", by="alice", reason="twice", known={"pay"}) is None
    assert [(r["action"], r["by"]) for r in tools.history(app)] == [
        ("disable", "ops-lead"),
        ("enable", "alice"),
    ]
    assert tools.switch(app, "pay") is None


def test_a_deploy_publishes_its_apps_catalog_where_the_admin_credential_is(client: BankClient) -> None:
    spec = "wakeful.examples.onboarding:app"
    for publish in (
        lambda: publish_tools(dataclasses.replace(client.settings, app=spec)),  # as `wakeful worker` starts
        lambda: wakeful("authority", "init", "--app", spec),
    ):
        client.admin.hdel(keys.AUTH_TOOL_CATALOG, onboarding.name)
        publish()
        listed = doc(wakeful("tools", "list", "--app", spec, "--json"))
        assert listed["published"] == listed["deployed"] == onboarding.catalog, listed
        assert sorted(t["name"] for t in listed["tools"]) == sorted(t.name for t in onboarding.tools)
        last = client.tools.history(onboarding.name)[-1]
        assert (last["action"], last["by"], last["tool"]) == ("publish", DEPLOYER, "*")
    assert not publish_tools(dataclasses.replace(client.settings, app=spec)), "a publish that changes nothing"
