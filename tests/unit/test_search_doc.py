"""docs/search.md held to the code: every command its bash blocks show is one the CLI parses, and
it shows both commands (tests/test_ingress.py runs them on the real stack)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import page_commands, parsed

pytestmark = pytest.mark.timeout(30)

PAGE = (Path(__file__).resolve().parents[2] / "docs/search.md").read_text()


@pytest.mark.parametrize("argv", page_commands(PAGE), ids=" ".join)
def test_every_command_on_the_page_parses(argv: list[str]) -> None:
    assert parsed(argv).callback is not None


def test_the_page_shows_the_query_and_the_search() -> None:
    assert {tuple(argv[:2]) for argv in page_commands(PAGE)} == {("task", "query"), ("task", "search")}
