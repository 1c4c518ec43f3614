"""Egress enforced on the real stack (D116): worker processes run egress_app, whose read-only tool
declares the egress name `pages`, mapped by WAKEFUL_EGRESS to one listener. In a loop step, the
model has the tool read the declared host, directly and through a process it starts (which can only
go by the executor's outbound proxy): both work. Then it names another host, on which a listener
counts connections: the call is refused before a connection is made (the listener counts none,
however the tool is made to try), the task goes to review with that host named, and the refusal is
counted and logged."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from model_server import Scripted, call, scripted_fleet, task_of, tool_messages

from wakeful.devstack.model_server import Reply, Request
from wakeful.operate.client import Client
from wakeful.schemas import events

APP = "egress_app:app"
DESK = "pages-desk"
FIRST_RECEIPT_S = 120.0
SETTLE_S = 60.0


@dataclass
class Listener:
    """A TCP listener on 127.0.0.1 that answers any request with a short page and counts connections."""

    page: str
    server: socket.socket = field(default_factory=lambda: socket.create_server(("127.0.0.1", 0)))
    seen: list[int] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"127.0.0.1:{self.server.getsockname()[1]}"

    def start(self) -> Listener:
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def _serve(self) -> None:
        while True:  # ends with the test process: a daemon thread
            conn, _ = self.server.accept()
            self.seen.append(1)
            with conn:
                conn.recv(4096)
                conn.sendall(
                    b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(self.page), self.page.encode())
                )


DECLARED = Listener("declared page").start()
UNDECLARED = Listener("secret sink").start()
PLANS: dict[str, list[tuple[str, str]]] = {}  # task -> the (where, via) of each read, in order


def next_step(request: Request) -> Reply:
    task_id = task_of(request)
    made, plan = len(tool_messages(request.body)), PLANS.get(task_id, [])  # a task of an earlier run: ends
    if made < len(plan):
        where, via = plan[made]
        return call("fetch_page", {"task_id": task_id, "where": where, "via": via})
    return call("finish", {"task_id": task_id})


@pytest.fixture(scope="module")
def fetching(client: Client) -> Iterator[Scripted]:
    client.add_signer(DESK, (events.CREATE,))
    with scripted_fleet(next_step, APP, WAKEFUL_EGRESS=f"pages={DECLARED.where}") as scripted:
        yield scripted


def ask(client: Client, plan: list[tuple[str, str]]) -> str:
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    PLANS[task_id] = plan
    event = client.send(DESK, events.CREATE, {"workflow": "fetch", "topic": "news"}, task_id=task_id)
    receipt = client.receipt(event.event_id, task_id, FIRST_RECEIPT_S, key_id=event.key_id)
    assert receipt["status"] == "accepted", receipt
    return task_id


def test_the_declared_host_is_reached_directly_and_through_a_process(
    client: Client, fetching: Scripted
) -> None:
    task_id = ask(client, [(DECLARED.where, "socket"), (DECLARED.where, "process")])
    shown = client.wait_settled(task_id, SETTLE_S)
    assert shown["stage"] == "closed", shown
    pages = tool_messages(fetching.asked(task_id)[-1])
    assert len(pages) == 2 and all("declared page" in page for page in pages), pages


@pytest.mark.parametrize("via", ["socket", "process"])
def test_an_undeclared_host_in_a_loop_step_is_refused_before_any_connection_and_parks_the_task(
    client: Client, fetching: Scripted, via: str
) -> None:
    before = len(UNDECLARED.seen)
    task_id = ask(client, [(DECLARED.where, "socket"), (UNDECLARED.where, via)])
    shown = client.wait_settled(task_id, SETTLE_S)
    assert shown["stage"] == "needs_review", shown
    assert f"tried {UNDECLARED.where}" in shown["last_refusal"], shown
    assert "outside its declared egress (pages)" in shown["last_refusal"]
    assert len(UNDECLARED.seen) == before, "a connection reached the undeclared host"
    step = shown["actions"][f"fetch_page:{task_id}:v1:s1"]
    assert step["status"] == "failed" and UNDECLARED.where in step["reason"], step
