"""docs/recovery.md held to the code: every command its bash blocks show is one the CLI parses, and
what it says the log does not hold is what `wakeful recover` reports (tests/test_recovery_drill.py
runs the drill on a real stack); and it says which role topics a recover re-drives and which it
does not."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_run import page_commands, parsed

from wakeful.consumers.kafka.retention import REDRIVEN
from wakeful.core import topics
from wakeful.operate.recover.run import NOT_ON_THE_LOG

pytestmark = pytest.mark.timeout(30)

PAGE = (Path(__file__).resolve().parents[2] / "docs/recovery.md").read_text()


def commands() -> list[list[str]]:
    return page_commands(PAGE)


@pytest.mark.parametrize("argv", commands(), ids=" ".join)
def test_every_command_on_the_page_parses(argv: list[str]) -> None:
    assert parsed(argv).callback is not None


def test_the_page_names_everything_the_log_does_not_hold() -> None:
    for what in NOT_ON_THE_LOG:
        key = re.search(r"\((wk:[^ ,)]*)", what)
        assert key is not None and f"`{key.group(1)}`" in PAGE, what
    assert len(re.findall(r"^- ", PAGE.split("what the log does not hold:")[1].split("##")[0], re.M)) == len(
        NOT_ON_THE_LOG
    )


def test_the_page_states_the_fence_bound_not_a_margin() -> None:
    assert "tenths of a millisecond" in PAGE and "1,000 past" not in PAGE


def test_the_page_says_which_role_topics_are_re_driven_and_which_are_not() -> None:
    """ "Done again" names the topics a recover re-drives (consumers/kafka/retention.REDRIVEN) and
    no other; "Not done again" names the other topics that carry work between roles."""
    section = PAGE.split("## What can be lost", 1)[1].split("\n## ", 1)[0]
    redone, not_redone = section.split("Not done again:", 1)
    between_roles = {topics.EVENTS, topics.WAKE, topics.PROPOSALS_REQUEST, topics.PROPOSALS}
    named = set(re.findall(r"`(wakeful\.[a-z.]+)`", redone))
    assert named & between_roles == set(REDRIVEN)
    not_named = set(re.findall(r"`(wakeful\.[a-z.]+)`", not_redone))
    assert not_named & between_roles == between_roles - set(REDRIVEN)
