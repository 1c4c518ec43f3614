"""An app is checked when it is made: every problem at once, each naming what to fix."""

from __future__ import annotations

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
