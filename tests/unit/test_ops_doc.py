"""docs/ops.md held to the code: every command its bash blocks show is one the CLI parses, it shows
`wakeful ops` with each of its options, the operator it names may throw switches on the local
stack, and the file it says the password is in is the one `wakeful ops` makes (tests/test_ops_page.py
runs the page on the real stack)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import page_commands, parsed

from wakeful.cli.ops_cmd import ops
from wakeful.operate.dev_signers import DEV_SIGNERS
from wakeful.operate.ops import auth as ops_auth
from wakeful.operate.release import OPERATOR_KIND

pytestmark = pytest.mark.timeout(30)

PAGE = (Path(__file__).resolve().parents[2] / "docs/ops.md").read_text()


def commands() -> list[list[str]]:
    return page_commands(PAGE)


@pytest.mark.parametrize("argv", commands(), ids=" ".join)
def test_every_command_on_the_page_parses(argv: list[str]) -> None:
    assert parsed(argv).callback is not None


def test_the_page_shows_wakeful_ops_with_each_of_its_options() -> None:
    shown = {word for argv in commands() if argv[0] == "ops" for word in argv if word.startswith("--")}
    options = {o for p in ops.params for o in p.opts if o.startswith("--")} - {"--help"}
    assert options - shown <= {"--host", "--app"}, options - shown  # both are named in the prose
    assert "`--host" in PAGE and "--app MODULE:ATTR" in PAGE


def test_the_operator_and_the_password_file_the_page_names_are_the_codes() -> None:
    assert OPERATOR_KIND in DEV_SIGNERS["ops-lead"] and f"--kinds {OPERATOR_KIND}" in PAGE
    assert f"secrets/admin/{ops_auth.NAME}.json" in PAGE
    assert f"lasts {ops_auth.SESSION_S // 3600} hours" in PAGE
