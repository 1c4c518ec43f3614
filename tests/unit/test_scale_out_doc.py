"""docs/scale-out.md held to the CLI: every command its bash blocks show is one the CLI parses,
and the page shows how to measure the whole box and the floor under it."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import page_commands, parsed

pytestmark = pytest.mark.timeout(30)

PAGE = Path(__file__).resolve().parents[2] / "docs/scale-out.md"


def commands() -> list[list[str]]:
    return page_commands(PAGE.read_text())


@pytest.mark.parametrize("argv", commands(), ids=" ".join)
def test_every_command_on_the_page_parses(argv: list[str]) -> None:
    assert parsed(argv).callback is not None


def test_the_page_shows_the_light_load_bench_the_idle_fleet_and_the_floor() -> None:
    shown = [" ".join(argv) for argv in commands()]
    assert "bench --tasks 1000 --rate 50 --json" in shown
    assert "bench --idle 60 --json" in shown
    assert "dev bench-hops --rate 50 --json" in shown
