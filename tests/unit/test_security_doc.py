"""docs/security.md held to the code: its table of what a stolen role credential can do has one row
for every role with a Redis or Kafka login, and no other; the files a row names as a role's include
the signer seal exactly when the role verifies HMACs; and every command its bash blocks show is
one the CLI parses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_run import page_commands, parsed

from wakeful.authority import signer_seal
from wakeful.core import kafka_rights
from wakeful.state import acl

pytestmark = pytest.mark.timeout(30)

PAGE = (Path(__file__).resolve().parents[2] / "docs/security.md").read_text()
SECTION = PAGE.split("## What a stolen role credential can do", 1)[1].split("\n## ", 1)[0]


def rows() -> dict[str, list[str]]:
    """role -> its cells (Kafka, Redis, files, can, cannot), from the section's table."""
    found: dict[str, list[str]] = {}
    for line in SECTION.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 6 and cells[0] not in ("role", "---"):
            found[cells[0]] = cells[1:]
    return found


def test_the_table_has_one_row_for_every_role_with_a_login() -> None:
    assert set(rows()) == set(acl.ROLES) | set(kafka_rights.ROLES)


@pytest.mark.parametrize("role", sorted(set(acl.ROLES) | set(kafka_rights.ROLES)))
def test_a_row_names_the_signer_seal_exactly_for_a_role_that_holds_it(role: str) -> None:
    files = rows()[role][2]
    holds = role in (*signer_seal.VERIFIERS, signer_seal.KEEPER)
    assert (f"{signer_seal.NAME}.json" in files) is holds, files


@pytest.mark.parametrize("argv", page_commands(PAGE), ids=" ".join)
def test_every_command_on_the_page_parses(argv: list[str]) -> None:
    assert parsed(argv).callback is not None


def test_the_page_shows_how_to_seal_an_older_registry() -> None:
    assert re.search(r"^wakeful authority signers seal$", PAGE, re.M)
