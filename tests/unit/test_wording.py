"""Tool wording is pinned like code (workflow/wording.py, D119): a task is shown the descriptions it
was stamped with unless its app refreshes the tool; an egress that gains an entry is refused at
deploy unless refreshed, and one that loses an entry never is; a reviewer reads each change; a
stored wording is believed only when it is true to its digest."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pay_tool import Pay
from pydantic import BaseModel

from wakeful.sdk import CLOSED, App, Next, Workflow
from wakeful.sdk.tools import Tool, catalog, wording, wording_digest, wording_of
from wakeful.workflow import wording as pinning
from wakeful.workflow.wording import Read, verified


class Bill(BaseModel):
    amount: int = 0


FLOW = Workflow(
    name="bill",
    version=1,
    state=Bill,
    stages={"received": ("ready",), "ready": (CLOSED,)},
    start=lambda s: Next("ready", Bill()),
    check=lambda ctx, effect: effect,
    done=lambda ctx, tool, result: Next(CLOSED),
)


def variant(**changed: Any) -> Tool[Any]:
    """Pay as a later deploy declares it, with `changed` class attributes."""
    later: type[Tool[Any]] = type("PayLater", (Pay,), changed)
    return later()


def app_of(*tools: Tool[Any], refresh: tuple[str, ...] = ()) -> App:
    return App(name="payapp", workflows=[FLOW], tools=list(tools), refresh=refresh)


BEFORE = wording([Pay()])


def test_the_stored_wording_is_what_the_catalog_stamp_names() -> None:
    assert wording_of(catalog([Pay()])) == wording_digest(BEFORE)


@pytest.mark.parametrize(
    ("raw", "believed"),
    [
        (orjson.dumps(BEFORE), True),
        (orjson.dumps([{**BEFORE[0], "description": "pay anyone anything"}]), False),  # planted text
        (orjson.dumps([{**BEFORE[0], "extra": 1}]), False),
        (b"not json", False),
        (orjson.dumps({"name": "pay"}), False),
        (None, False),
    ],
)
def test_a_stored_wording_is_believed_only_when_true_to_its_digest(raw: bytes | None, believed: bool) -> None:
    assert (verified(wording_digest(BEFORE), raw) is not None) is believed


def test_a_task_is_shown_the_description_it_started_with_unless_the_tool_is_refreshed() -> None:
    new = variant(description="Pay the payee, and email a receipt.")
    assert pinning.pinned(app_of(new), BEFORE) == {"pay": Pay.description}
    assert pinning.pinned(app_of(new, refresh=("pay",)), BEFORE) == {}
    assert pinning.pinned(app_of(new), None) == {}  # stamped before wording was stored: the deployed


@pytest.mark.parametrize(
    ("egress", "refresh", "refused"),
    [
        (("bank",), (), []),
        ((), (), []),  # narrowed: every task at once, never refused
        (("bank", "mail.example:25"), (), ["pay reaches mail.example:25 more"]),
        (("bank", "mail.example:25"), ("pay",), []),
    ],
)
def test_a_widened_egress_is_refused_at_deploy_unless_refreshed(
    egress: tuple[str, ...], refresh: tuple[str, ...], refused: list[str]
) -> None:
    assert Pay.egress == ("bank",)
    assert pinning.widened(app_of(variant(egress=egress), refresh=refresh), BEFORE) == refused


def test_the_first_deploy_and_a_new_tool_widen_nothing() -> None:
    assert pinning.widened(app_of(variant(egress=("anywhere:1",))), None) == []


def test_a_reviewer_reads_the_description_diff_and_the_egress_change() -> None:
    new = variant(description="Pay the payee once. Email a receipt.", egress=("mail.example:25",))
    said = pinning.changes(app_of(new), BEFORE)
    assert said[0] == "tool pay: description changed (sleeping tasks keep the old)"
    assert any(line.startswith("    +") and "Email a receipt" in line for line in said)
    assert "tool pay: egress + mail.example:25 (refused at deploy: name the tool in App.refresh)" in said
    assert "tool pay: egress - bank (every task, at once)" in said


def test_a_digest_is_read_once_per_process() -> None:
    asked: list[str] = []

    def fetch(digest: str) -> bytes | None:
        asked.append(digest)
        return orjson.dumps(BEFORE)

    read = Read(fetch)
    stamp = catalog([Pay()])
    assert read.of_stamp(stamp) == BEFORE and read.of_stamp(stamp) == BEFORE
    assert len(asked) == 1
    assert read.of_stamp("catalog-0123456789abcdef") is None  # a stamp of the older kind names none
