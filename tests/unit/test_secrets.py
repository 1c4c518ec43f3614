"""Per-role secrets: written once, private, never silently replaced, and a missing one says what to run."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from wakeful.core import secrets
from wakeful.core.errors import ConfigError
from wakeful.core.settings import Settings


def _settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"WAKEFUL_HOME": str(tmp_path)})


def test_a_secret_is_made_once_and_kept(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    first = secrets.ensure(s, "gate", "redis", lambda: {"password": "one"})
    second = secrets.ensure(s, "gate", "redis", lambda: {"password": "two"})
    assert first == second == {"password": "one"}


def test_secret_files_and_folders_are_private(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    secrets.ensure(s, "gate", "kafka", lambda: {"password": "x"})
    where = secrets.path(s, "gate", "kafka")
    assert stat.S_IMODE(where.stat().st_mode) == 0o600
    assert stat.S_IMODE(where.parent.stat().st_mode) == 0o700
    assert where.parent.parent == tmp_path / "secrets"
    assert not [p for p in where.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_missing_secret_names_the_command_that_makes_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="wakeful dev up"):
        secrets.load(_settings(tmp_path), "executor", "signing")


def test_a_damaged_secret_is_refused_not_used(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    where = secrets.path(s, "timer", "redis")
    where.parent.mkdir(parents=True)
    where.write_bytes(b'{"password": 7}')
    with pytest.raises(ConfigError, match="not a secret file"):
        secrets.load(s, "timer", "redis")


def test_rotation_replaces_a_secret(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    secrets.ensure(s, "relay", "kafka", lambda: {"password": "old"})
    secrets.replace(s, "relay", "kafka", {"password": "new"})
    assert secrets.load(s, "relay", "kafka") == {"password": "new"}


@pytest.mark.parametrize(("role", "name"), [("../admin", "redis"), ("gate", "../kafka"), ("", "redis")])
def test_a_secret_name_cannot_leave_its_folder(tmp_path: Path, role: str, name: str) -> None:
    with pytest.raises(ConfigError):
        secrets.path(_settings(tmp_path), role, name)
