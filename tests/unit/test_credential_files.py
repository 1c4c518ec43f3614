"""Each role's Redis password is in a file of its own secrets folder, and a role without its own
file is refused whatever else is there; an old state dir with every password in one file keeps
working after an upgrade, moved into the per-role folders by `dev up` or `admin acl`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from wakeful.core import secrets
from wakeful.core.errors import MissingCredential
from wakeful.core.settings import Settings
from wakeful.state import acl, credentials


def test_a_role_without_its_own_file_is_refused_whatever_else_is_there(tmp_path: Path) -> None:
    settings = Settings.from_env({"WAKEFUL_HOME": str(tmp_path)})
    for role in acl.ROLES:
        if role != "timer":
            credentials.ensure(settings, role)
    with pytest.raises(MissingCredential, match="wakeful dev up") as info:
        acl.connect(settings, "timer")
    assert info.value.role == "timer"


def test_old_single_credentials_file_is_moved_into_per_role_folders_keeping_the_passwords(
    tmp_path: Path,
) -> None:
    settings = Settings.from_env({"WAKEFUL_HOME": str(tmp_path)})
    old = {role: f"old-{role}" for role in (*acl.users(settings), acl.DEFAULT)}
    credentials.old_file(settings).write_bytes(orjson.dumps(old))
    credentials.ensure(settings, "relay", "rotated-since")  # a folder that has its own keeps it
    said = credentials.migrate(settings)
    assert said is not None and "removed" in said
    assert not credentials.old_file(settings).exists()
    for role in acl.users(settings):  # a static downstream user's too (the examples' have none: D125)
        doc = secrets.load(settings, role, credentials.NAME)
        assert doc == {
            "user": acl.user_name(role),
            "password": "rotated-since" if role == "relay" else old[role],
        }
    assert secrets.load(settings, "admin", credentials.DEFAULT_NAME)["password"] == old[acl.DEFAULT]
    assert credentials.migrate(settings) is None


def test_dev_acl_on_an_old_state_dir_says_it_moved_the_passwords(tmp_path: Path) -> None:
    users = acl.users(Settings.from_env({}))
    old = {role: f"old-{role}" for role in (*users, acl.DEFAULT)}
    (tmp_path / credentials.OLD_FILE).write_bytes(orjson.dumps(old))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKEFUL_")}
    env.update(WAKEFUL_HOME=str(tmp_path), WAKEFUL_REDIS_URL="redis://127.0.0.1:9/0")
    result = subprocess.run(
        [sys.executable, "-m", "wakeful.cli.main", "admin", "acl"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("moved the Redis passwords")]
    expected = acl.setuser_commands({role: f"old-{role}" for role in users}, users)
    # and the static users of downstreams whose users are all minted per step go (D125)
    expected += [["ACL", "DELUSER", acl.user_name(d)] for d in acl.minted_only(Settings.from_env({}))]
    assert result.stdout.strip().splitlines() == [" ".join(command) for command in expected]
    assert "old-gate" not in result.stdout + result.stderr


def test_the_example_downstreams_have_no_static_login_and_an_old_password_of_theirs_is_removed(
    tmp_path: Path,
) -> None:
    settings = Settings.from_env({"WAKEFUL_HOME": str(tmp_path)})
    examples = {d.user for d in acl.downstreams_of(settings)}
    assert examples and set(acl.minted_only(settings)) == examples
    assert not examples & set(acl.users(settings))  # no user, so no password on disk, is made for them
    for user in examples:  # a state dir from before: each kept a static password
        secrets.ensure(settings, user, credentials.NAME, lambda: {"user": "old", "password": "reusable"})
    made = credentials.ensure_all(settings)
    assert not examples & set(made)
    assert not [u for u in examples if secrets.exists(settings, u, credentials.NAME)]
    assert credentials.retire(settings) == []  # once is enough
    for user in examples:
        with pytest.raises(MissingCredential, match=f"credential = '{user}'") as info:
            acl.connect(settings, user)
        assert info.value.role == user
