"""Every module and command a page names exists: README.md and every page of docs/ may name only
module files of the project's own folders (`consumers/gate/main.py`), `wakeful.` modules (and
attributes of them) that import, and `wakeful` commands that the CLI has.

docs/decisions.md is left out on purpose: it is a record of history, and each entry names the
modules and commands as they were when it was decided (a later entry says what moved).

A name is caught by how it is written: (a) a path `folder/module.py` or `folder/sub/module.py`
under one of FOLDERS; (b) a dotted `wakeful.x.y` that is not a Kafka topic; (c) `wakeful <group>
<command>` (or `python -m wakeful.cli.main ...`) at the start of a command in a ```-fenced block or
of a `code span`: its words are followed down the click tree until a command that takes no
subcommand; options, arguments and placeholders after that are not checked.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from wakeful.cli.main import cli
from wakeful.core import topics

ROOT = Path(__file__).resolve().parents[2]
HISTORY = "decisions.md"
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != HISTORY)]
PACKAGES = (
    "consumers|core|state|workflow|operate|bench|devstack|cli|sdk|schemas|authority|producers|client|examples"
)
FOLDERS = f"{PACKAGES}|tests|scripts|compose"
# Not inside a longer path (`~/x/core/a.py`, a URL): the folder is where the path starts. A path
# names a file or folder (`consumers/gate/main.py`, `operate/ops/`, `scripts/setup`) or a module's
# attribute (`consumers/gate/rules.decide`).
PATH = re.compile(rf"(?<![\w./~-])(?:{FOLDERS})/(?:[\w-]+/)*(?:[\w-]+(?:\.[A-Za-z_]\w*)*)?")
# Into one of the packages: `wakeful.gate` and `wakeful.tool.outcome` are span and attribute names
# (docs/tracing.md), `wakeful.read` an event kind, `wakeful.events` a topic.
DOTTED = re.compile(rf"(?<![\w./-])wakeful\.(?:{PACKAGES})(?:\.[A-Za-z_]\w*)*\b(?![\w-])")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
# Where a command starts within a line of code: its start, or after a shell separator; environment
# assignments (`WAKEFUL_X=1 wakeful ...`) and a prompt may come first.
COMMAND = re.compile(
    r"(?:^|&&|\|\||[|;(]|\$\()\s*(?:\$\s+)?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*"
    r"(?:wakeful|\S*python\S*\s+-m\s+wakeful\.cli\.main)\s+(?P<words>[^|;&()#]*)"
)
WORD = re.compile(r"[a-z][a-z0-9-]*")


def lines_of(page: Path) -> Iterator[tuple[int, str, bool]]:
    """Each line of `page` with its number and whether it is inside a fenced block."""
    fenced_by = ""
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        fence = FENCE.match(line)
        if fence and (not fenced_by or fence.group(1).startswith(fenced_by)):
            fenced_by = "" if fenced_by else fence.group(1)[:3]
            continue
        yield number, line, bool(fenced_by)


def path_exists(path: str) -> bool:
    """Whether `path` is a file or folder of the project, or `module.attr` of a module file of it."""
    if (ROOT / path).exists():
        return True
    head, _, tail = path.rpartition("/")
    parts = tail.split(".")
    return any(
        (ROOT / head / ".".join(parts[:cut])).with_suffix(".py").is_file() for cut in range(1, len(parts))
    )


def missing_path(text: str) -> Iterator[str]:
    for found in PATH.finditer(text):
        if not path_exists(found.group(0)):
            kind = "module file" if found.group(0).endswith(".py") else "path"
            yield f"{kind} {found.group(0)}"


def resolves(dotted: str) -> bool:
    """Whether `dotted` is a module (a package or a file) of wakeful, followed by attributes it has."""
    parts = dotted.split(".")
    for cut in range(len(parts), 1, -1):
        name = ".".join(parts[:cut])
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            continue
        if cut == len(parts):
            return True
        value: object = importlib.import_module(name)
        for attribute in parts[cut:]:
            if not hasattr(value, attribute):
                return False
            value = getattr(value, attribute)
        return True
    return False


def missing_module(text: str) -> Iterator[str]:
    for found in DOTTED.finditer(text):
        dotted = found.group(0)
        if dotted in topics.ALL:  # wakeful.authority: a Kafka topic, and a package too
            continue
        if not resolves(dotted):
            yield f"module {dotted}"


def missing_command(code: str) -> Iterator[str]:
    for found in COMMAND.finditer(code):
        group: click.Command = cli
        path = ["wakeful"]
        for word in found.group("words").split():
            if not isinstance(group, click.Group) or not WORD.fullmatch(word):
                break  # a command's options and arguments, or a placeholder
            command = group.commands.get(word)
            if command is None:
                yield f"command `{' '.join([*path, word])}`"
                break
            group, path = command, [*path, word]


def code_of(line: str, fenced: bool) -> list[str]:
    """The pieces of `line` that are code: the whole line in a fenced block, else its code spans."""
    return [line] if fenced else SPAN.findall(line)


def problems(page: Path) -> list[str]:
    found: list[str] = []
    for number, line, fenced in lines_of(page):
        where = f"{page.relative_to(ROOT)}:{number}"
        names = [*missing_path(line), *missing_module(line)]
        for code in code_of(line, fenced):
            names.extend(missing_command(code))
        found.extend(f"{where} names {name}, which does not exist" for name in names)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_a_page_names_only_modules_and_commands_that_exist(page: Path) -> None:
    found = problems(page)
    assert not found, "\n".join(found)


def test_the_pages_are_found_and_the_history_is_left_out() -> None:
    names = {p.name for p in PAGES}
    assert {"README.md", "security.md", "state.md"} <= names and HISTORY not in names


@pytest.mark.parametrize(
    ("text", "fenced", "caught"),
    [
        ("see consumers/gate/nothing_here.py", False, "module file consumers/gate/nothing_here.py"),
        ("see consumers/gate/main.py", False, None),
        ("~/src/core/not_ours.py", False, None),
        ("tests/unit/nothing_here.py.", False, "module file tests/unit/nothing_here.py"),
        ("consumers/gate/rules.decide and operate/ops/ and scripts/setup", False, None),
        ("consumers/gate/nothing.decide", False, "path consumers/gate/nothing.decide"),
        ("compose/no_such_file.py", False, "module file compose/no_such_file.py"),
        ("`wakeful.state.no_such_module`", False, "module wakeful.state.no_such_module"),
        ("wakeful.sdk.NoSuchThing", False, "module wakeful.sdk.NoSuchThing"),
        ("wakeful.sdk.Tool and wakeful.cli.main", False, None),
        ("the topic wakeful.proposals.request", False, None),
        ("the span wakeful.gate, its attribute wakeful.tool.outcome", False, None),
        ("wakeful.operate.no_such.thing", False, "module wakeful.operate.no_such.thing"),
        ("`wakeful dev no-such-command --json`", False, "command `wakeful dev no-such-command`"),
        ("`wakeful no-such-group`", False, "command `wakeful no-such-group`"),
        ("wakeful dev no-such-command   # in prose, not code", False, None),
        ("WAKEFUL_X=1 wakeful admin nothing", True, "command `wakeful admin nothing`"),
        ("python -m wakeful.cli.main dev nope", True, "command `wakeful dev nope`"),
        ("wakeful task approve <id> --by alice | wakeful keys list", True, None),
        ("wakeful admin kafka-acl [--apply]", True, None),
        ("wakeful dev kafka-acl --apply", True, None),
    ],
)
def test_a_planted_bad_name_is_caught_and_a_good_one_is_not(
    text: str, fenced: bool, caught: str | None
) -> None:
    names = [*missing_path(text), *missing_module(text)]
    for code in code_of(text, fenced):
        names.extend(missing_command(code))
    assert names == ([caught] if caught else []), names


def test_the_message_names_the_page_the_line_and_the_missing_name(tmp_path: Path) -> None:
    page = ROOT / "docs" / "planted-for-a-test.md"
    page.write_text("# planted\n\n```bash\nwakeful dev nope\n```\nsee core/nope.py\n")
    try:
        found = problems(page)
    finally:
        page.unlink()
    assert found == [
        "docs/planted-for-a-test.md:4 names command `wakeful dev nope`, which does not exist",
        "docs/planted-for-a-test.md:6 names module file core/nope.py, which does not exist",
    ]
