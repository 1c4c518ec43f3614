"""`wakeful new-agent`: a starting app whose own tests pass as written, never over a file that exists."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from wakeful.cli.main import cli
from wakeful.cli.scaffold import problem, render
from wakeful.sdk import App, load_app


def new_agent(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["new-agent", *args])
    return result.exit_code, result.output


def test_new_agent_writes_an_app_whose_generated_tests_pass(tmp_path: Path) -> None:
    code, output = new_agent("expense_claim", "--dir", str(tmp_path / "agents"))
    assert code == 0, output
    folder = tmp_path / "agents"
    assert sorted(p.name for p in folder.iterdir()) == ["expense_claim.py", "test_expense_claim.py"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_expense_claim.py"],
        cwd=folder,
        env={**os.environ, "WAKEFUL_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "6 passed" in result.stdout


def test_the_generated_tests_run_as_the_scaffold_says_without_pytest(tmp_path: Path) -> None:
    """A plain `pip install wakeful` brings no pytest: `python test_NAME.py` runs them all the same."""
    code, output = new_agent("rooms", "--dir", str(tmp_path))
    assert code == 0 and "test it:  python " in output, output
    hidden = "import sys; sys.modules['pytest'] = None"  # as if pytest were not installed
    no_pytest = f"{hidden}; import runpy; runpy.run_path('test_rooms.py', run_name='__main__')"
    result = subprocess.run(
        [sys.executable, "-c", no_pytest],
        cwd=tmp_path,
        env={**os.environ, "WAKEFUL_HOME": str(tmp_path / "home"), "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == "6 passed, 0 failed"


def test_generated_app_loads_as_the_roles_load_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert new_agent("leave_request", "--dir", str(tmp_path))[0] == 0
    monkeypatch.syspath_prepend(str(tmp_path))
    app = load_app("leave_request:app")
    assert isinstance(app, App) and app.name == "leave_request"
    assert [wf.name for wf in app.workflows] == ["leave_request"]
    assert [(t.name, t.key_for("t-1", 1)) for t in app.tools_at("ready")] == [
        ("record", "LEAVE_REQUEST:t-1:v1")
    ]


def test_new_agent_refuses_to_overwrite_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "test_booking.py").write_text("# mine\n")
    code, output = new_agent("booking", "--dir", str(tmp_path))
    assert code != 0 and "already exist" in output and "nothing was written" in output
    assert (tmp_path / "test_booking.py").read_text() == "# mine\n"
    assert not (tmp_path / "booking.py").exists()

    assert new_agent("claims", "--dir", str(tmp_path))[0] == 0
    written = (tmp_path / "claims.py").read_text()
    (tmp_path / "claims.py").write_text(written + "# edited\n")
    assert new_agent("claims", "--dir", str(tmp_path))[0] != 0
    assert (tmp_path / "claims.py").read_text() == written + "# edited\n"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("Booking", "not a module name"),
        ("1st", "not a module name"),
        ("my-agent", "not a module name"),
        ("class", "shadow"),
        ("json", "shadow"),
        ("wakeful", "shadow"),
        ("record_args", "RecordArgs"),
    ],
)
def test_new_agent_refuses_a_name_that_is_not_a_fresh_module_name(
    tmp_path: Path, name: str, why: str
) -> None:
    refused = problem(name)
    assert refused is not None and why in refused
    code, output = new_agent(name, "--dir", str(tmp_path))
    assert code != 0 and why in output
    assert list(tmp_path.iterdir()) == []


def test_generated_text_names_the_agent_everywhere() -> None:
    files = render("room_hold")
    assert set(files) == {"room_hold.py", "test_room_hold.py"}
    module = files["room_hold.py"]
    assert "class RoomHold(BaseModel)" in module and 'op_key = "ROOM_HOLD:{task_id}:v{version}"' in module
    assert "$" not in module.replace("$WAKEFUL_HOME", "")
    assert "from room_hold import" in files["test_room_hold.py"]
