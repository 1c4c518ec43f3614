"""`wakeful ledger` prints every downstream's entries in both forms, whatever their shape: the bank's
bookings, the shop's remedies and notices, the register's registrations, payments and removals
(cli/ledger_view.py). Pure: the entries are the example downstreams' records as their `entries`
listings dump them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from wakeful.cli import ledger_view
from wakeful.examples import downstreams
from wakeful.examples.bank import LedgerEntry
from wakeful.examples.shop import Notice, Remedy
from wakeful.examples.suppliers import Payment, Registration, Removal
from wakeful.schemas.base import Record
from wakeful.state.downstreams import Downstream

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ACCOUNT, SUPPLIER = "DE44500105175407324931", "S-" + "a" * 16
BANK: list[Record] = [
    LedgerEntry(
        entry_id="L-1-0",
        op_key="REFUND:t-1:v1",
        task_id="t-1",
        amount=2500,
        currency="EUR",
        fence=3,
        booked_at=AT,
    )
]
SHOP: list[Record] = [
    Remedy(
        op_key="REMEDY:t-2:v1:s2",
        task_id="t-2",
        fence=1,
        at=AT,
        remedy="refund",
        order_id="O-1",
        amount=300,
        currency="EUR",
    ),
    Notice(
        op_key="NOTICE:t-2:v1:s3",
        task_id="t-2",
        fence=1,
        at=AT,
        order_id="O-1",
        message='Lost: "refunded" 3 = 3',
    ),
]
REGISTER: list[Record] = [
    Registration(
        op_key="REGISTER:t-3:v1",
        task_id="t-3",
        fence=2,
        at=AT,
        supplier_id=SUPPLIER,
        legal_name="Acme GmbH",
        account=ACCOUNT,
    ),
    Payment(
        op_key="PAY:t-3:v1",
        task_id="t-3",
        fence=2,
        at=AT,
        payment_id="P-" + "b" * 16,
        supplier_id=SUPPLIER,
        account=ACCOUNT,
        amount=900,
        currency="EUR",
    ),
    Removal(op_key="REGISTER:t-4:v1", task_id="t-4", fence=5, at=AT),
]
SHAPES: list[tuple[str, list[Record]]] = [("bank", BANK), ("shop", SHOP), ("suppliers", REGISTER)]


def booked(shapes: list[tuple[str, list[Record]]]) -> ledger_view.Booked:
    return [(user, [r.model_dump(mode="json") for r in records]) for user, records in shapes]


def test_every_example_downstream_lists_its_entries_for_wakeful_ledger() -> None:
    # every one kept in Redis: a Kafka downstream (D123) books nothing there, its topic is its record
    kept = [d for d in downstreams.DOWNSTREAMS if isinstance(d, Downstream)]
    assert [(d.user, d.entries is not None) for d in kept] == [
        ("bank", True),
        ("suppliers", True),
        ("shop", True),
    ]


@pytest.mark.parametrize(("user", "records"), SHAPES, ids=[u for u, _ in SHAPES])
def test_ledger_json_holds_every_field_of_every_entry_with_its_downstream(
    user: str, records: list[Record]
) -> None:
    out = ledger_view.as_json(booked(SHAPES))
    mine = [e for e in out if e["downstream"] == user]
    assert mine == [{"downstream": user, **r.model_dump(mode="json")} for r in records]
    assert orjson.loads(orjson.dumps(out)) == out  # what `--json` prints, and reads back


@pytest.mark.parametrize(("user", "records"), SHAPES, ids=[u for u, _ in SHAPES])
def test_ledger_human_form_shows_each_entry_on_one_line_under_its_downstream(
    user: str, records: list[Record]
) -> None:
    lines = ledger_view.human(booked(SHAPES)).splitlines()
    start = lines.index(f"{user}: {len(records)} entr{'y' if len(records) == 1 else 'ies'}")
    shown = lines[start + 1 : start + 1 + len(records)]
    for line, record in zip(shown, records, strict=True):
        fields = record.model_dump(mode="json")
        assert line.startswith("  ") and "schema_version" not in line
        for key, value in fields.items():
            if key != "schema_version":
                assert f"{key}={_shown(value)}" in line, (key, line)


def _shown(value: Any) -> str:
    plain = isinstance(value, str) and value and not any(c in value for c in ' "=')
    return str(value) if plain else orjson.dumps(value).decode()


def test_a_downstream_with_nothing_booked_says_so_and_no_downstream_says_no_entries() -> None:
    assert ledger_view.human([("bank", []), *booked(SHAPES[1:2])]).splitlines()[0] == "bank: no entries"
    assert ledger_view.human([]) == "no entries"
    assert ledger_view.as_json([("bank", [])]) == []


def test_an_entrys_own_downstream_field_does_not_hide_which_downstream_booked_it() -> None:
    out = ledger_view.as_json([("shop", [{"downstream": "elsewhere", "op_key": "K"}])])
    assert out == [{"downstream": "shop", "op_key": "K"}]


@pytest.mark.parametrize("text", ["\x1b[2J\x1b[Hpaid", "a\rb", "a\nop_key=forged", "café", "x\u202ey"])
def test_a_downstream_value_never_writes_a_control_character_or_a_forged_field_to_the_terminal(
    text: str,
) -> None:
    """A value a downstream keeps may come from a model's proposal: on the operator's terminal it is
    shown as JSON (escaped), never raw, unless it is plain printable ASCII with no space, quote or `=`."""
    line = ledger_view.human([("shop", [{"op_key": "NOTICE:t-1:v1", "text": text}])])
    assert all(c == "\n" or 0x20 <= ord(c) < 0x7F for c in line), repr(line)
    assert line.count("\n") == 1 and line.split("\n")[1].startswith("  op_key=NOTICE:t-1:v1 text="), line
