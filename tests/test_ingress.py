"""Upstream systems through wakeful.client and `wakeful ingress`, on the real stack: a principal
sends with its own key, reads its receipt, and finds its task by id, by stage and by wait, from the
task index the relay keeps (nothing unsealed). A read must be signed by a registered key, for that
very request, now; a key reads only its own receipts and its own tenant's tasks; another tenant's
task does not exist to it; a revoked key reads nothing more."""

from __future__ import annotations

import random
import string
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from cli_run import doc, wakeful
from helpers import ingress_door

from wakeful.client import NotAnswered, Query, ReadRefused, Upstream
from wakeful.devstack.fleet import Fleet
from wakeful.examples.refund import Stage
from wakeful.operate.client import Client
from wakeful.producers import reads
from wakeful.producers.keys import generate_signer
from wakeful.producers.signing import sign_event
from wakeful.schemas import events
from wakeful.state import acl, keys

DESK, OTHER_DESK, OUTSIDER = "ingress-desk", "ingress-desk-2", "ingress-globex"
KINDS = (events.CREATE, events.AMEND, events.RUN)
START_S, INDEX_S = 30.0, 30.0

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def door(client: Client) -> Iterator[str]:
    """`wakeful ingress` on a free port, as an operator starts it; its URL once it answers."""
    for who, tenant in ((DESK, "default"), (OTHER_DESK, "default"), (OUTSIDER, "globex")):
        client.add_signer(who, KINDS, tenant=tenant)
    with ingress_door() as url:
        yield url


def upstream(client: Client, principal: str, url: str) -> Upstream:
    return Upstream(client.signer(principal), publisher=client.publisher, url=url)


def eventually(read: Callable[[], Any], ok: Callable[[Any], bool]) -> Any:
    """What `read` returns once `ok` holds: the index follows the log a moment behind."""
    deadline = time.monotonic() + INDEX_S
    while True:
        found = read()
        if ok(found):
            return found
        assert time.monotonic() < deadline, f"never: {found}"
        time.sleep(0.05)


def test_an_upstream_system_sends_reads_its_receipt_and_finds_its_task_by_id_stage_and_wait(
    client: Client, shared_fleet: Fleet, door: str
) -> None:
    with upstream(client, DESK, door) as up:
        named = f"t-{uuid.uuid4().hex[:12]}"
        event = up.send(events.CREATE, {"amount": 2500, "currency": "EUR"}, task_id=named)
        receipt = up.receipt(event, timeout=60)
        assert receipt["status"] == "accepted", receipt
        task = eventually(
            lambda: up.task(named), lambda t: t is not None and t["stage"] == Stage.AWAITING_APPROVAL
        )
        assert task["task_id"] == named and task["workflow"] == "refund" and task["task_version"] == 1
        [wait] = task["waits"]
        assert wait["wait_for"] == "approval" and wait["correlation_id"].startswith("corr-")
        assert "data" not in task and "amount" not in task  # the index holds no business fields
        waiting = eventually(
            lambda: list(up.tasks(waiting="approval")), lambda ts: named in {t["task_id"] for t in ts}
        )
        assert all(t["waits"] for t in waiting)
        at_stage = list(up.tasks(stage=Stage.AWAITING_APPROVAL, page=2))  # more than one page, in order
        assert named in {t["task_id"] for t in at_stage}


def test_a_key_reads_only_its_own_receipts_and_its_own_tenants_tasks(
    client: Client, shared_fleet: Fleet, door: str
) -> None:
    with upstream(client, DESK, door) as up:
        named = f"t-{uuid.uuid4().hex[:12]}"
        event = up.send(events.CREATE, {"amount": 10, "currency": "EUR"}, task_id=named)
        assert up.receipt(event, timeout=60)["status"] == "accepted"
        eventually(lambda: up.task(named), lambda t: t is not None)
    with upstream(client, OTHER_DESK, door) as colleague:  # same tenant, another key
        assert colleague.task(named) is not None
        with pytest.raises(NotAnswered):
            colleague.receipt(event.event_id, task_id=named, timeout=0.5)
    with upstream(client, OUTSIDER, door) as outsider:  # another tenant: no such task
        assert outsider.task(named) is None
        assert named not in {t["task_id"] for t in outsider.tasks(stage=Stage.CLOSED)}
        with pytest.raises(NotAnswered):
            outsider.receipt(event.event_id, task_id=named, timeout=0.5)


def test_the_door_never_serves_a_task_the_relays_login_wrote_into_the_index_by_hand(
    client: Client, shared_fleet: Fleet, door: str
) -> None:
    """Issue 46, item 4 (D93): a summary HSET and a ZADD by the relay's own Redis login, past its
    index function: a task that does not exist, and a closed task rewritten as waiting."""
    relay = acl.connect(client.settings, "relay")
    with upstream(client, DESK, door) as up:
        named = f"t-{uuid.uuid4().hex[:12]}"
        event = up.send(events.CREATE, {"amount": 10, "currency": "EUR"}, task_id=named)
        assert up.receipt(event, timeout=60)["status"] == "accepted"
        real = eventually(lambda: up.task(named), lambda t: t is not None and t["stage"] == Stage.CLOSED)
        ghost = f"t-ghost{uuid.uuid4().hex[:8]}"
        wait = {"wait_for": "approval", "deadline": "2030-06-01T10:00:00Z", "correlation_id": "corr-x"}
        waiting = {**real, "stage": Stage.AWAITING_APPROVAL, "state_version": 99, "waits": [wait]}
        tasks = keys.index_tasks("default")
        relay.hset(tasks, named, orjson.dumps(waiting))
        relay.hset(tasks, ghost, orjson.dumps({**waiting, "task_id": ghost}))
        for name in (
            keys.index_wait("default", "approval"),
            keys.index_stage("default", Stage.AWAITING_APPROVAL),
        ):
            relay.zadd(name, {named: 0, ghost: 0})
        assert up.task(ghost) is None
        assert up.task(named) is None  # forged in place: unknown to the door until its next change
        listed = {t["task_id"] for t in up.tasks(waiting="approval")}
        assert named not in listed and ghost not in listed


def test_a_tasks_view_and_a_search_by_its_attribute_answer_its_own_tenant_only(
    client: Client, shared_fleet: Fleet, door: str
) -> None:
    """Issue 48, item 5 (D107): the refund workflow's `progress` view and `currency` attribute,
    through the read door and through the operator's commands (docs/search.md); another tenant's
    key finds neither the task nor its view."""
    # a currency of this test's own, and only tasks made since it began, on a stack kept from earlier runs
    currency = "".join(random.choices(string.ascii_uppercase, k=3))
    since = datetime.now(UTC)
    mine = Query(attributes={"currency": currency}, created_after=since)
    with upstream(client, DESK, door) as up:
        named = [f"t-{uuid.uuid4().hex[:12]}" for _ in range(3)]
        for n, task_id in enumerate(named):
            sent = up.send(events.CREATE, {"amount": 10 + n, "currency": currency}, task_id=task_id)
            assert up.receipt(sent, timeout=60)["status"] == "accepted"
        found = eventually(
            lambda: [t["task_id"] for t in up.search(mine, page=2)],
            lambda ids: len(ids) == 3,
        )
        assert found == named[::-1]  # newest created first, across pages of two
        view = eventually(lambda: up.query(named[0], "progress"), lambda v: v is not None)
        assert view["task_id"] == named[0] and view["value"]["currency"] == currency
        with pytest.raises(ReadRefused, match="its views: progress"):
            up.query(named[0], "nothing")
    with upstream(client, OUTSIDER, door) as outsider:
        assert outsider.query(named[0], "progress") is None
        assert list(outsider.search(mine)) == []
    shown = wakeful("task", "query", named[0], "progress", "--json")
    assert shown.returncode == 0 and doc(shown)["value"]["currency"] == currency, shown.stderr
    listed = wakeful(
        "task", "search", "--workflow", "refund", "--attr", f"currency={currency}",
        "--created-after", since.isoformat(), "--json",
    )  # fmt: skip
    assert [t["task_id"] for t in doc(listed)["tasks"]] == named[::-1], listed.stderr
    missing = wakeful("task", "query", named[0], "progress", "--tenant", "globex")
    assert missing.returncode == 1 and "no task" in missing.stderr


def get(url: str, target: str, header: str | None) -> httpx.Response:
    return httpx.get(url + target, headers={reads.HEADER: header} if header is not None else {}, timeout=5)


def test_a_read_that_is_not_signed_for_this_request_now_by_a_registered_key_is_refused(
    client: Client, door: str, tmp_path: Path
) -> None:
    signer = client.signer(DESK)
    target = "/v1/tasks/t-1"
    assert get(door, target, reads.sign(signer, "GET", target)).status_code == 404  # signed: no such task
    stranger = generate_signer("key-nobody-registered", tmp_path / "nobody.key")
    stale = sign_event(
        signer,
        reads.READ,
        {"method": "GET", "target": target},
        issued_at=datetime.now(UTC) - timedelta(minutes=5),
    )
    as_event = sign_event(signer, events.CREATE, {"method": "GET", "target": target})
    cases = {
        "no header": (None, "no X-Wakeful-Read header"),
        "not base64 JSON": ("%%%not-a-read", "is not a signed read"),
        "over the size": ("A" * 5000, "is over"),
        "another path": (reads.sign(signer, "GET", "/v1/tasks/t-2"), "names another request"),
        "another method": (reads.sign(signer, "POST", target), "names another request"),
        "stale": (reads.encoded(stale), "sign each request when it is sent"),
        "an event, not a read": (reads.encoded(as_event), "a read is signed as kind"),
        "unregistered key": (reads.sign(stranger, "GET", target), "unknown key id"),
    }
    for name, (header, why) in cases.items():
        answer = get(door, target, header)
        assert answer.status_code == 401 and why in answer.json()["error"], (name, answer.text)
    tampered = reads.sign(signer, "GET", target)
    flipped = tampered[:-8] + ("A" if tampered[-8] != "A" else "B") + tampered[-7:]
    assert get(door, target, flipped).status_code == 401


def test_bad_ids_and_filters_get_a_precise_400(client: Client, door: str) -> None:
    signer = client.signer(DESK)
    for target, why in (
        ("/v1/tasks/t%7B1%7D", "task id"),
        ("/v1/receipts/short?task_id=t-1", "event id"),
        ("/v1/tasks?stage=Bad-Stage", "stage"),
        ("/v1/tasks?waiting=a%20b", "wait kind"),
        ("/v1/tasks?stage=closed&limit=0", "limit is 1 to 100"),
        ("/v1/tasks?stage=closed&after=x", "whole numbers"),
        ("/v1/tasks", "list by"),
    ):
        answer = get(door, target, reads.sign(signer, "GET", target))
        assert answer.status_code == 400 and why in answer.json()["error"], (target, answer.text)


def test_a_revoked_key_reads_nothing_more(client: Client, door: str) -> None:
    principal = f"ingress-gone-{uuid.uuid4().hex[:6]}"
    key_id = client.add_signer(principal, KINDS)
    with upstream(client, principal, door) as up:
        assert up.task("t-none") is None
        client.authority.revoke_signer(key_id, "ops-lead", "the laptop was lost")
        with pytest.raises(ReadRefused, match="unknown key id"):
            up.task("t-none")
