"""An app is checked when it is made: every problem at once, each naming what to fix."""

from __future__ import annotations

import dataclasses

import pytest

from wakeful.core.errors import ConfigError
from wakeful.examples.tutorial import BookRoom, rooms
from wakeful.sdk import App
from wakeful.sdk.app import load_app


class LongNamed(BookRoom):
    name = "book_" + "r" * 70  # its op keys, behind UNDO:, pass 200 characters for the longest task id
    op_key = "{tool}:{task_id}:v{version}"


class Unformattable(BookRoom):
    name = "odd_book"
    op_key = "{tool}:{task_id}:{missing}"


def test_a_tool_whose_op_keys_cannot_name_every_tasks_records_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError) as caught:
        App(name="long", workflows=[rooms], tools=[LongNamed(), Unformattable()])
    said = str(caught.value)
    assert (
        f"tool {LongNamed.name}'s op keys must match" in said and "use a shorter op_key or tool name" in said
    )
    assert "tool odd_book's op_key cannot be formed" in said  # both problems, in one error


@pytest.mark.parametrize(
    "spec",
    [
        "wakeful.examples.refund:app",
        "wakeful.examples.onboarding:app",
        "wakeful.examples.support:app",
        "wakeful.examples.tutorial:app",
    ],
)
def test_the_bundled_apps_form_op_keys_for_every_task_id(spec: str) -> None:
    assert load_app(spec).tools


def _view(v: object) -> dict[str, object]:
    return {}


@pytest.mark.parametrize(
    ("views", "attributes", "said"),
    [
        ({"Progress": _view}, {}, "workflow room_booking's view 'Progress' must be named by"),
        ({"1st": _view}, {}, "workflow room_booking's view '1st' must be named by"),
        ({"p" * 41: _view}, {}, f"workflow room_booking's view '{'p' * 41}' must be named by"),
        ({}, {"room-kind": _view}, "workflow room_booking's attribute 'room-kind' must be named by"),
        ({}, {"": _view}, "workflow room_booking's attribute '' must be named by"),
        ({}, {7: _view}, "workflow room_booking's attribute 7 must be named by"),
        ({"progress": "stage"}, {}, "workflow room_booking's view 'progress' is str, not a function"),
        ({}, {"room": None}, "workflow room_booking's attribute 'room' is NoneType, not a function"),
        ((_view,), {}, "workflow room_booking's views must be a mapping of name -> function"),
    ],
)
def test_a_view_or_attribute_the_index_cannot_carry_stops_the_app_with_its_name(
    views: object, attributes: object, said: str
) -> None:
    wrong = dataclasses.replace(rooms, views=views, attributes=attributes)  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as caught:
        App(name="rooms", workflows=[wrong], tools=[BookRoom()])
    assert said in str(caught.value)


def test_every_wrong_view_and_attribute_is_named_at_once() -> None:
    wrong = dataclasses.replace(rooms, views={"A": _view, "b": 1}, attributes={"c d": _view})  # type: ignore[dict-item]
    with pytest.raises(ConfigError) as caught:
        App(name="rooms", workflows=[wrong], tools=[BookRoom()])
    assert [name in str(caught.value) for name in ("view 'A'", "view 'b'", "attribute 'c d'")] == [True] * 3


def test_views_and_attributes_named_as_the_index_names_them_are_taken() -> None:
    right = dataclasses.replace(
        rooms, views={"progress": _view, "a" + "_" * 39: _view}, attributes={"room": _view}
    )
    app = App(name="rooms", workflows=[right], tools=[BookRoom()])
    assert set(app.workflows[0].views) == {"progress", "a" + "_" * 39}


@pytest.mark.parametrize("priority", [-1, 10, 2.5, True, "5", None])
def test_a_priority_that_is_not_a_whole_number_from_0_to_9_stops_the_app(priority: object) -> None:
    wrong = dataclasses.replace(rooms, priority=priority)  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as caught:
        App(name="rooms", workflows=[wrong], tools=[BookRoom()])
    assert f"workflow room_booking's priority {priority!r} must be a whole number from 0 to 9" in str(
        caught.value
    )


@pytest.mark.parametrize("priority", [0, 9])
def test_a_priority_from_0_to_9_is_taken(priority: int) -> None:
    app = App(name="rooms", workflows=[dataclasses.replace(rooms, priority=priority)], tools=[BookRoom()])
    assert app.workflows[0].priority == priority
