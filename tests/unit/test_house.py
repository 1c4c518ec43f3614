"""The house's rooms (docs/decisions.md D94): a module under consumers/ lives in a role's package or
in the roles' shared plumbing; the role packages are exactly those import-linter keeps independent;
a planted import from one role into another breaks that contract; the map names every folder; and
docs/memory.md's map of memory's modules is the files that exist."""

from __future__ import annotations

import ast
import inspect
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SHARED = "kafka"  # the roles' shared plumbing: consumers/kafka/


def _contract(kind: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        c for c in PYPROJECT["tool"]["importlinter"]["contracts"] if c["type"] == kind
    ]
    assert len(found) == 1, f"one {kind} contract expected, found {len(found)}"
    return found[0]


def _role_packages() -> set[str]:
    return {p.name for p in (ROOT / "consumers").iterdir() if (p / "__init__.py").exists()} - {SHARED}


def test_no_module_lives_under_consumers_outside_a_role_or_the_shared_plumbing() -> None:
    loose = sorted(p.name for p in (ROOT / "consumers").glob("*.py") if p.name != "__init__.py")
    assert loose == [], f"consumers/ holds modules of no role: {loose}; move each to a role or kafka/"


def test_every_role_package_is_in_the_independence_contract_and_nothing_else_is() -> None:
    listed = {m.removeprefix("wakeful.consumers.") for m in _contract("independence")["modules"]}
    assert listed == _role_packages()


def test_every_role_package_has_its_loop_in_main() -> None:
    for role in sorted(_role_packages()):
        text = (ROOT / "consumers" / role / "main.py").read_text()
        assert re.search(r"^def main\(", text, re.M), f"consumers/{role}/main.py has no main()"


def test_the_house_map_names_every_folder() -> None:
    decisions = (ROOT / "docs" / "decisions.md").read_text()
    house = decisions[decisions.index("## D94.") :]
    house = house[: house.index("\n## ", 1)] if "\n## " in house[1:] else house
    packages = PYPROJECT["tool"]["setuptools"]["packages"]
    folders = {name.split(".", 1)[1].replace(".", "/") for name in packages}
    missing = sorted(
        f
        for f in folders
        if f"`{f}/`" not in house and not (f.startswith("consumers/") and "`consumers/<role>/`" in house)
    )
    assert missing == [], f"docs/decisions.md D94's map leaves out {missing}"
    for role in _role_packages():
        assert f"`{role}`" in house, f"D94 does not name the role package {role}"


def test_memory_map_lists_exactly_the_modules_of_memory() -> None:
    page = (ROOT / "docs" / "memory.md").read_text()
    section = page[page.index("## Where memory lives") :]
    section = section[: section.index("\n## ", 1)]
    listed = set(re.findall(r"^\| `([\w/]+\.py)` \|", section, re.M))
    for path in sorted(listed):
        assert (ROOT / path).is_file(), f"docs/memory.md names {path}, which does not exist"
    folders = [p for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    named = {
        str(p.relative_to(ROOT))
        for folder in folders
        for p in folder.rglob("*.py")
        if "memory" in str(p.relative_to(ROOT)) and p.name != "__init__.py"
    }
    assert named - listed == set(), f"docs/memory.md's map leaves out {sorted(named - listed)}"


@pytest.mark.timeout(120)
def test_a_planted_import_from_one_role_into_another_breaks_the_independence_contract(tmp_path: Path) -> None:
    tree = tmp_path / "wakeful"
    tree.mkdir()
    (tree / "__init__.py").write_text("")
    for name, folder in PYPROJECT["tool"]["setuptools"]["package-dir"].items():
        copy = tree / name.split(".", 1)[1]
        shutil.copytree(ROOT / folder, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "consumers" / "gate" / "planted.py").write_text("from wakeful.consumers.executor import main\n")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports_command; lint_imports_command()",
            "--no-cache",
        ],
        check=False,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=110,
    )
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    broken = [line for line in out.splitlines() if line.endswith(" BROKEN")]
    assert broken == ["No role imports another: each role package is independent of every other BROKEN"], out
    assert "wakeful.consumers.gate.planted -> wakeful.consumers.executor" in out, out


LOCAL = ("dev", "demo", "bench", "chaos", "bench-")  # the commands of the local stack and its benches


def _commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name, command in group.commands.items():
        here = (*path, name)
        if hasattr(command, "commands"):
            yield from _commands(command, here)
        else:
            yield here, command


def _imports(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def test_devstack_holds_no_command_an_operator_runs_against_production() -> None:
    from wakeful.cli.main import cli

    reached = []
    for path, command in _commands(cli):
        if path[0].startswith(LOCAL):
            continue
        callback = inspect.unwrap(command.callback)
        module = ast.parse(Path(inspect.getfile(callback)).read_text())
        top = {n for stmt in module.body for n in _imports(stmt) if not isinstance(stmt, ast.FunctionDef)}
        own = _imports(ast.parse(textwrap.dedent(inspect.getsource(callback))))
        local = sorted(m for m in top | own if m.startswith(("wakeful.devstack", "wakeful.bench")))
        if local:
            reached.append(f"wakeful {' '.join(path)}: {local}")
    assert reached == [], "operator commands that reach the local stack's code:\n" + "\n".join(reached)


MODULE_MAX, FUNCTION_MAX = 320, 60  # "about 300" and "about 50", with room for a docstring's growth


def _oversized() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for folder in PYPROJECT["tool"]["setuptools"]["package-dir"].values():
        for path in (ROOT / folder).rglob("*.py"):
            name, text = str(path.relative_to(ROOT)), path.read_text()
            if text.count("\n") > MODULE_MAX:
                found.add((name, ""))
            for node in ast.walk(ast.parse(text)):
                long = (getattr(node, "end_lineno", 0) or 0) - getattr(node, "lineno", 0) + 1 > FUNCTION_MAX
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and long:
                    found.add((name, node.name))
    return found


def test_every_module_and_function_past_its_size_is_one_the_house_says_why_for() -> None:
    decisions = (ROOT / "docs" / "decisions.md").read_text()
    house = decisions[decisions.index("## D94.") : decisions.index("## D95.")]
    rows = re.findall(r"^\| `([\w/]+\.py)` \| (?:`(\w+)`)? *\| [^|]+ \|$", house, re.M)
    said = {(module, function) for module, function in rows}
    assert said, "D94 has no table of what stays over the sizes"
    found = _oversized()
    assert found - said == set(), (
        f"past {MODULE_MAX} lines or functions past {FUNCTION_MAX}, with no why in D94: "
    )
    f"{sorted(found - said)}"
    assert said - found == set(), f"D94 says why for what is no longer over: {sorted(said - found)}"
