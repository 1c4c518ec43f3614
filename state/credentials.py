"""Where each Redis user's password lives: in its own role's secrets folder (core/secrets.py).

    $WAKEFUL_SECRETS/<role>/redis.json          {"user": "wakeful-<role>", "password": ...}; read
                                                by that role's process only (the executor's process
                                                also reads its tools' downstreams' folders)
    $WAKEFUL_SECRETS/admin/redis-default.json   Redis's built-in default user, whose password no
                                                role is given (state/acl.py, DEFAULT_RULES)

`wakeful dev up`, `wakeful admin acl` and the compose init service make what is missing and keep
what exists: a new password would lock out a running role. A state dir from before per-role
secrets kept every password in $WAKEFUL_HOME/redis-credentials.json; migrate() moves them into
the folders unchanged, so the users of a running Redis still match, and removes that file.
"""

from __future__ import annotations

import contextlib
import secrets as random
from pathlib import Path

import orjson

from wakeful.core import secrets
from wakeful.core.settings import Settings
from wakeful.state import acl

NAME = "redis"
DEFAULT_NAME = "redis-default"  # in the admin's folder: only the admin may know it
OLD_FILE = "redis-credentials.json"


def _new(user: str, password: str | None = None) -> dict[str, str]:
    return {"user": user, "password": password or random.token_urlsafe(24)}


def ensure(settings: Settings, role: str, password: str | None = None) -> str:
    """The role's password, made (or taken from `password`) the first time and kept after."""
    return secrets.ensure(settings, role, NAME, lambda: _new(acl.user_name(role), password))["password"]


def ensure_default(settings: Settings, password: str | None = None) -> str:
    return secrets.ensure(settings, "admin", DEFAULT_NAME, lambda: _new(acl.DEFAULT, password))["password"]


def ensure_all(settings: Settings) -> dict[str, str]:
    """User (and "default") -> password, for writing the users: every role's, every static
    downstream user's (acl.users) and the default's. The password of a downstream that no longer
    has a static user (D125) is removed."""
    retire(settings)
    creds = {role: ensure(settings, role) for role in acl.users(settings)}
    creds[acl.DEFAULT] = ensure_default(settings)
    return creds


def retired(settings: Settings) -> list[Path]:
    """The password files of downstreams whose users are all minted per step (acl.minted_only): a
    state dir from before D125 holds a static one, whose user the ACLs written now no longer name."""
    found = (secrets.path(settings, user, NAME) for user in acl.minted_only(settings))
    return [where for where in found if where.is_file()]


def retire(settings: Settings) -> list[Path]:
    """Remove the files retired() names (and each folder left empty); returns them."""
    gone = retired(settings)
    for where in gone:
        where.unlink()
        with contextlib.suppress(OSError):  # its folder, if nothing else is in it
            where.parent.rmdir()
    return gone


def rotate(settings: Settings, role: str) -> None:
    """Give one user a new password (reload Redis's users and restart that role afterwards)."""
    if role == acl.DEFAULT:
        secrets.replace(settings, "admin", DEFAULT_NAME, _new(acl.DEFAULT))
    else:
        secrets.replace(settings, role, NAME, _new(acl.user_name(role)))


def old_file(settings: Settings) -> Path:
    return settings.home / OLD_FILE


def migrate(settings: Settings) -> str | None:
    """Move the passwords of an old single credentials file into the per-role folders and remove
    it; returns the line to tell the operator, or None when there was nothing to move."""
    path = old_file(settings)
    if not path.exists():
        return None
    old = orjson.loads(path.read_bytes())
    if not isinstance(old, dict):
        old = {}
    for role in acl.users(settings):
        if isinstance(old.get(role), str):
            ensure(settings, role, old[role])  # a folder that already has one keeps its own
    if isinstance(old.get(acl.DEFAULT), str):
        ensure_default(settings, old[acl.DEFAULT])
    path.unlink()
    return (
        f"moved the Redis passwords from {path} into {settings.secrets}/<role>/{NAME}.json "
        "(each role reads only its own) and removed the old file"
    )
