"""What a task shows its tenant's readers (workflow/views.py, D107): its workflow's views and search
attributes, computed at every change by the writer, which no bug of the app's may stop."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from enum import IntEnum, StrEnum
from typing import Any

import orjson
import pytest
from helpers import new_checkpoint
from hypothesis import given
from hypothesis import strategies as st

from wakeful.authority.snapshot import Snapshot
from wakeful.examples import onboarding as onboarding_example
from wakeful.examples import refund as refund_example
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk import App, Start, Viewed
from wakeful.workflow import engine, views
from wakeful.workflow.views import ATTRIBUTE_CHARS, NOTHING, VIEW_BYTES, Shown

NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice", "bob"}), limit=1000)


def app_with(
    views_: Mapping[str, Callable[[Viewed[Any]], Any]] | None = None,
    attributes: Mapping[str, Callable[[Viewed[Any]], object]] | None = None,
) -> App:
    wf = dataclasses.replace(refund_example.refund, views=views_ or {}, attributes=attributes or {})
    return App(name="refund", workflows=[wf], tools=[refund_example.BankRefund()])


def shown_by(view: Callable[[Viewed[Any]], Any]) -> dict[str, Any]:
    return views.shown(app_with({"v": view}))(new_checkpoint()).views["v"]


def attribute_of(fn: Callable[[Viewed[Any]], object]) -> dict[str, str]:
    return views.shown(app_with(attributes={"a": fn}))(new_checkpoint()).attributes


def raising(exc: BaseException) -> Callable[[Viewed[Any]], Any]:
    def fn(v: Viewed[Any]) -> Any:
        raise exc

    return fn


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


class Colour(StrEnum):
    RED = "red"

    def __str__(self) -> str:
        return "Colour.RED"


class Level(IntEnum):
    HIGH = 3


# ---- views ---------------------------------------------------------------------------------------

VIEW_TABLE: list[tuple[str, Callable[[Viewed[Any]], Any], dict[str, Any]]] = [
    (
        "a mapping",
        lambda v: {"stage": v.stage, "amount": v.state.amount},
        {"stage": "received", "amount": 100},
    ),
    (
        "tuples and times",
        lambda v: {"t": (1, 2), "at": NOW},
        {"t": [1, 2], "at": "2030-06-01T09:00:00+00:00"},
    ),
    ("an empty mapping", lambda v: {}, {}),
    ("raises", raising(ValueError("bad amount")), {"error": "ValueError: bad amount"}),
    ("raises unprintably", raising(Unprintable()), {"error": "Unprintable: (its message cannot be printed)"}),
    ("a list", lambda v: [1, 2], {"error": "the view returned list, not a mapping"}),
    ("None", lambda v: None, {"error": "the view returned NoneType, not a mapping"}),
    ("a model", lambda v: v.state, {"error": "the view returned Refund, not a mapping"}),
]


@pytest.mark.parametrize(
    ("view", "expected"), [row[1:] for row in VIEW_TABLE], ids=[row[0] for row in VIEW_TABLE]
)
def test_a_view_shows_its_json_object_or_why_it_cannot(
    view: Callable[[Viewed[Any]], Any], expected: dict[str, Any]
) -> None:
    assert shown_by(view) == expected


@pytest.mark.parametrize(
    ("returned", "why"),
    [
        ({"when": object()}, "the view is not JSON: TypeError: Type is not JSON serializable: object"),
        ({1: "a"}, "the view is not JSON: TypeError: Dict key must be str"),
        ({"n": 2**70}, "the view is not JSON: TypeError: Integer exceeds 64-bit range"),
        ({"s": "\ud800"}, "the view is not JSON: TypeError: str is not valid UTF-8: surrogates not allowed"),
        ({"big": "x" * VIEW_BYTES}, f"the view is {VIEW_BYTES + 10} bytes of JSON, over {VIEW_BYTES}"),
    ],
    ids=["an object", "a key not text", "a 70-bit int", "a lone surrogate", "too big"],
)
def test_a_view_the_record_cannot_carry_shows_what_is_wrong(returned: dict[Any, Any], why: str) -> None:
    assert shown_by(lambda v: returned) == {"error": why}


def test_a_views_error_quotes_at_most_200_characters_of_its_message() -> None:
    error = shown_by(raising(KeyError("k" * 500)))["error"]
    assert error == f"KeyError: '{'k' * 199}... (302 more characters)"


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.datetimes(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4)
        | st.builds(object)
    ),
    max_leaves=20,
)


@given(returned=json_like | st.dictionaries(st.text(max_size=8), json_like, max_size=6))
def test_whatever_a_view_returns_the_record_carries_it_or_says_why_not(returned: Any) -> None:
    try:
        plain = orjson.loads(orjson.dumps(dict(returned))) if isinstance(returned, Mapping) else None
    except TypeError:
        plain = None
    got = shown_by(lambda v: returned)
    if plain is not None and len(orjson.dumps(plain)) <= VIEW_BYTES:
        assert got == plain  # carried as given, in plain JSON
    else:
        assert set(got) == {"error"} and len(orjson.dumps(got)) < 300


@given(exc=st.sampled_from([ValueError, TypeError, KeyError, ZeroDivisionError, RecursionError, Unprintable]))
def test_no_exception_a_view_or_an_attribute_raises_stops_the_change(exc: type[Exception]) -> None:
    app = app_with({"v": raising(exc())}, {"a": raising(exc())})
    got = views.shown(app)(new_checkpoint())
    assert got.attributes == {} and got.views["v"]["error"].startswith(f"{exc.__name__}: ")


# ---- attributes ----------------------------------------------------------------------------------

ATTRIBUTE_TABLE: list[tuple[str, object, str | None]] = [
    ("true", True, "true"),
    ("false", False, "false"),
    ("an int", 7, "7"),
    ("a negative int", -12, "-12"),
    ("a float", 1.5, "1.5"),
    ("text", "EUR", "EUR"),
    ("empty text", "", ""),
    ("text of 200", "x" * ATTRIBUTE_CHARS, "x" * ATTRIBUTE_CHARS),
    ("a str enum, as its value", Colour.RED, "red"),
    ("an int enum, as its number", Level.HIGH, "3"),
    ("text of 201", "x" * (ATTRIBUTE_CHARS + 1), None),
    ("an int of 201 digits", 10**200, None),
    ("an int past what str() prints", 10**5000, None),
    ("None", None, None),
    ("a list", ["EUR"], None),
    ("a mapping", {"c": "EUR"}, None),
    ("a time", NOW, None),
    ("a lone surrogate", "\ud800", None),
]


@pytest.mark.parametrize(
    ("returned", "expected"), [row[1:] for row in ATTRIBUTE_TABLE], ids=[row[0] for row in ATTRIBUTE_TABLE]
)
def test_an_attribute_is_its_values_own_text_or_is_left_out(returned: object, expected: str | None) -> None:
    assert attribute_of(lambda v: returned) == ({} if expected is None else {"a": expected})


def test_an_attribute_that_raises_is_left_out_and_the_others_stay() -> None:
    app = app_with(attributes={"bad": raising(ValueError()), "currency": lambda v: v.state.currency})
    assert views.shown(app)(new_checkpoint()).attributes == {"currency": "EUR"}


@given(value=st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=300) | st.binary())
def test_an_attribute_is_short_text_or_nothing_whatever_the_value(value: object) -> None:
    got = views.text(value)
    assert got is None or (isinstance(got, str) and len(got) <= ATTRIBUTE_CHARS and orjson.dumps(got))
    if isinstance(value, str) and got is not None:
        assert got == value


# ---- which declarations, and what they read --------------------------------------------------------


def test_a_view_reads_the_task_as_its_tenant_names_and_stores_it() -> None:
    made = engine.create(app_with(), "refund", Start("t-1", "svc", "acme", {"amount": 2500}, AUTH, NOW))
    assert isinstance(made, engine.Moved)
    cp = made.checkpoint.model_copy(update={"task_id": "acme.t-1", "updated_at": NOW + timedelta(seconds=1)})
    seen: list[Viewed[Any]] = []

    def view(v: Viewed[Any]) -> dict[str, Any]:
        seen.append(v)
        return {}

    views.shown(app_with({"v": view}))(cp)
    assert seen == [
        Viewed(
            task_id="t-1",
            stage="awaiting_approval",
            version=1,
            state=refund_example.Refund(amount=2500, currency="EUR"),
            tenant="acme",
            requester="svc",
            created_at=NOW,
            updated_at=NOW + timedelta(seconds=1),
            waits=("approval",),
        )
    ]


def test_a_task_pinned_to_a_kept_version_shows_that_versions_views() -> None:
    old = dataclasses.replace(refund_example.refund, views={"old": lambda v: {"v": 1}})
    new = dataclasses.replace(refund_example.refund, version=2, views={"new": lambda v: {"v": 2}})
    app = App(name="refund", workflows=[new], retired=[old], tools=[refund_example.BankRefund()])
    cp = new_checkpoint()
    pinned = cp.model_copy(update={"business": cp.business.model_copy(update={"workflow_version": 1})})
    current = cp.model_copy(update={"business": cp.business.model_copy(update={"workflow_version": 2})})
    assert [views.shown(app)(c).views for c in (pinned, current)] == [{"old": {"v": 1}}, {"new": {"v": 2}}]


def test_an_app_that_declares_nothing_shows_nothing_without_reading_the_task() -> None:
    unreadable = new_checkpoint().model_copy(
        update={"business": new_checkpoint().business.model_copy(update={"data": {}})}
    )
    assert views.shown(app_with())(unreadable) is NOTHING
    assert views.shown(app_with({"v": lambda v: {}}))(_of_workflow(unreadable, "other", 1)) is NOTHING
    assert views.shown(app_with({"v": lambda v: {}}))(_of_workflow(unreadable, "refund", 9)) is NOTHING


def test_a_state_its_model_cannot_read_shows_each_view_that_error_unquoted_and_no_attribute() -> None:
    cp = new_checkpoint()
    broken = cp.model_copy(update={"business": cp.business.model_copy(update={"data": {"amount": "lots"}})})
    got = views.shown(app_with({"p": lambda v: {}, "q": lambda v: {}}, {"a": lambda v: "x"}))(broken)
    assert got.attributes == {} and set(got.views) == {"p", "q"}
    # what the model says of the state quotes it: only its kind is shown, never the stored "lots"
    assert got.views["p"] == {"error": "the task's state does not read as Refund: ValidationError"}


def test_the_bundled_refund_shows_its_progress_and_currency() -> None:
    made = engine.create(
        refund_example.app, "refund", Start("t-1", "svc", "acme", {"amount": 2500}, AUTH, NOW)
    )
    assert isinstance(made, engine.Moved)
    assert views.shown(refund_example.app)(made.checkpoint) == Shown(
        {
            "progress": {
                "stage": "awaiting_approval",
                "amount": 2500,
                "currency": "EUR",
                "awaiting_approval": True,
            }
        },
        {"currency": "EUR"},
    )


def test_the_bundled_onboarding_is_searchable_by_country_and_never_by_its_account() -> None:
    payload = {"legal_name": "Acme Tools GmbH", "country": "DE", "amount": 120_000, "currency": "EUR"}
    made = engine.create(
        onboarding_example.app, "supplier_onboarding", Start("t-1", "svc", "acme", payload, AUTH, NOW)
    )
    assert isinstance(made, engine.Moved)
    assert views.shown(onboarding_example.app)(made.checkpoint) == Shown({}, {"country": "DE"})


def _of_workflow(cp: Checkpoint, name: str, version: int) -> Checkpoint:
    business = cp.business.model_copy(update={"workflow": name, "workflow_version": version})
    return cp.model_copy(update={"business": business})
