"""Per-role secrets: one directory per role, so a role's process reads only its own.

    $WAKEFUL_SECRETS/                 (default $WAKEFUL_HOME/secrets; 0700)
      <role>/                         (0700; in compose, the role's own read-only volume)
        redis.json                    the role's Redis ACL user and password
        kafka.json                    the role's Kafka SCRAM principal and password
        signing.json                  the role's channel key for what it publishes to other roles
        verifying.json                a reader's copies of the channel keys of its topic's senders
      admin/redis-default.json        the password of Redis's default user, which no role is given

Each file is one JSON object of strings, written once (0600, atomically) and never overwritten in
place: a new password or key is a deliberate rotation (`replace`). A missing file is a ConfigError
that says which command makes it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import orjson

from wakeful.core.errors import ConfigError
from wakeful.core.settings import Settings

MAKE_HINT = "`wakeful dev up` creates it for the local stack (compose: the init service)"


def path(settings: Settings, role: str, name: str) -> Path:
    """Where `role`'s secret `name` ("redis", "kafka", "signing", "redis-default") lives."""
    if not role.replace("-", "").isalnum() or not name.replace("-", "").isalnum():
        raise ConfigError("WAKEFUL_SECRETS", f"bad secret name {role!r}/{name!r}")
    return settings.secrets / role / f"{name}.json"


def exists(settings: Settings, role: str, name: str) -> bool:
    return path(settings, role, name).is_file()


def load(settings: Settings, role: str, name: str) -> dict[str, str]:
    """The secret as written; a missing or damaged file says how to make it."""
    where = path(settings, role, name)
    try:
        raw = where.read_bytes()
    except FileNotFoundError:
        raise ConfigError(str(where), f"no {name} secret for role {role!r}: {MAKE_HINT}") from None
    except OSError as exc:
        raise ConfigError(str(where), f"cannot read it ({exc.strerror}): fix its owner or mode") from exc
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
        raise ConfigError(str(where), "not a secret file (a JSON object of strings): restore it or rotate it")
    return doc


def ensure(settings: Settings, role: str, name: str, make: Callable[[], dict[str, str]]) -> dict[str, str]:
    """The secret, made by `make()` the first time; an existing one is kept as it is."""
    if exists(settings, role, name):
        return load(settings, role, name)
    doc = make()
    _write(path(settings, role, name), doc, exclusive=True)
    return load(settings, role, name)  # a racing writer may have won; everyone uses what is on disk


def replace(settings: Settings, role: str, name: str, doc: dict[str, str]) -> None:
    """A deliberate rotation: the new secret replaces the old one atomically."""
    _write(path(settings, role, name), doc, exclusive=False)


def _write(where: Path, doc: dict[str, str], *, exclusive: bool) -> None:
    for folder in (where.parent.parent, where.parent):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    body = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    tmp = where.with_name(f".{where.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    if exclusive:
        try:
            os.link(tmp, where)  # fails if another writer got there first: theirs stands
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    else:
        tmp.replace(where)
