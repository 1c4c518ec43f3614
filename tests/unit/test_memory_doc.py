"""docs/memory.md held to the code: every command its bash blocks show is one the CLI parses, it
shows every `wakeful memory` command, and the limits, names and digests it states are the code's
(tests/test_memory_cli.py runs the commands on the real stack)."""

from __future__ import annotations

import pytest
from cli_run import parsed
from memory_doc import PLANTED, commands, memory_commands, page, shown

from wakeful.cli.memory.commands import memory
from wakeful.examples.onboarding import REMITTANCE, VERIFIER
from wakeful.examples.onboarding import app as onboarding
from wakeful.examples.onboarding_rules import subject
from wakeful.examples.onboarding_story import PLANTED as LETTER
from wakeful.examples.onboarding_story import PLANTED_ACCOUNT, SUPPLIER, VERIFIED_ACCOUNT
from wakeful.schemas.memory import VALUE_CHARS, evidence_ref
from wakeful.state import keys
from wakeful.workflow.memory import MAX_PER_CHANGE


@pytest.mark.parametrize("argv", commands(), ids=" ".join)
def test_every_command_on_the_page_parses(argv: list[str]) -> None:
    assert parsed(argv).callback is not None


def test_the_page_shows_every_memory_command() -> None:
    assert {argv[1] for argv in memory_commands()} == set(memory.commands)


def test_the_page_states_the_limits_the_code_keeps() -> None:
    text = " ".join(page().split())
    assert f"at most {keys.MEMORY_PER_SUBJECT} records" in text
    assert f"at most {keys.MEMORY_RECORD_BYTES} bytes" in text
    assert f"at most {VALUE_CHARS} characters" in text
    assert f"at most {MAX_PER_CHANGE} candidates" in text
    assert f"`{keys.memory_refused('N')}`" in text


def test_the_walk_through_names_what_the_onboarding_app_remembers() -> None:
    text = page()
    fact = onboarding.fact_table[REMITTANCE]
    assert fact.high_impact and fact.verifiers == (VERIFIER,)
    for said in (
        REMITTANCE,
        VERIFIER,
        subject(SUPPLIER),
        VERIFIED_ACCOUNT,
        PLANTED_ACCOUNT,
        evidence_ref(LETTER),
    ):
        assert said in text, f"docs/memory.md does not say {said!r}"
    forgotten = {argv[argv.index("--lineage") + 1] for argv in shown("forget")}
    assert forgotten == {evidence_ref(LETTER)}, "the page forgets what the supplier letter left"
    assert [argv[2] for argv in shown("release")] == [PLANTED]
