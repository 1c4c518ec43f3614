"""README.md held to the code: its topic list is core/topics.py's, its settings table names every
WAKEFUL_* variable the code reads (and none it does not), and it says plainly that the compose file
has never been run for as long as docs/compose.md says so."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from wakeful.core import topics

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
VARIABLE = re.compile(r"WAKEFUL_[A-Z0-9_]+")
# Read by the code but no setting of a user's: each with why it is left out of the table.
NOT_SETTINGS = {
    "WAKEFUL_PARENT_PID": "set by the supervisor for the roles it spawns, never by a person",
    "WAKEFUL_MINTER_SOCKET": "set by the executor for the minter it starts (D120), never by a person",
    "WAKEFUL_REDIS_CREDENTIALS": "read only to refuse it with how to move on (README's Troubleshooting)",
}
# Folders of the package that hold no code of the runtime's own.
SKIPPED = {"tests", "wakeful.egg-info", "docs", "scripts", ".git"}


@functools.cache
def read_by_the_code() -> dict[str, str]:
    """Every WAKEFUL_* name a module of the package holds as a whole string (an env.get(...) key, a
    click envvar, a constant), with the first module that does: docstrings and messages that merely
    mention one do not count."""
    found: dict[str, str] = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in SKIPPED:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and VARIABLE.fullmatch(node.value)
            ):
                found.setdefault(node.value, str(rel))
    return found


def table_variables() -> set[str]:
    """The variables the README's Configuration table names in its first column."""
    section = README.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `WAKEFUL_"):
            names |= set(VARIABLE.findall(line.split("|")[1]))
    return names


def test_the_scan_finds_the_settings_module_and_the_option_envvars() -> None:
    found = read_by_the_code()
    assert found["WAKEFUL_KAFKA_HEAP"] == "core/settings.py"
    assert {"WAKEFUL_OPS_SESSION_IDLE", "WAKEFUL_INGRESS_RATE", "WAKEFUL_METRICS_PORT"} <= set(found)


def test_the_settings_table_names_every_variable_the_code_reads() -> None:
    missing = {name: where for name, where in read_by_the_code().items() if name not in NOT_SETTINGS}
    missing = {name: where for name, where in missing.items() if name not in table_variables()}
    assert not missing, f"README's Configuration table lacks (variable: a module that reads it): {missing}"


def test_the_settings_table_names_no_variable_the_code_does_not_read() -> None:
    assert table_variables() - set(read_by_the_code()) == set()


def test_every_variable_left_out_of_the_table_is_still_read() -> None:
    assert set(NOT_SETTINGS) <= set(read_by_the_code())


def test_the_topic_list_is_every_topic_wakeful_creates() -> None:
    bullet = re.search(r"^- \*\*Topics\*\*:(.*?)^- ", README, re.DOTALL | re.MULTILINE)
    assert bullet is not None, "README's local stack section has no **Topics** bullet"
    assert set(re.findall(r"`(wakeful\.[a-z.]+)`", bullet.group(1))) == set(topics.ALL)


def test_the_readme_says_the_compose_stack_never_ran_while_the_compose_page_does() -> None:
    compose_page = (ROOT / "docs/compose.md").read_text()
    if "no container of this stack has run" in compose_page:
        assert "**It has never been run**" in README
