"""The systems outside the runtime that an app's tools call, when they keep their records in the
stack's own Redis: the example apps' bank and supplier register (wakeful.examples.downstreams).

The runtime knows only this shape. Each downstream has the rights of a Redis user of its own, that
reach its own keys and nothing else: the users its minter makes for each step of a tool that
declares `credential = "<user>"` (D120) have them, and so does a static user (`wakeful-<user>`, its
password in its own secrets folder, state/credentials.py) for tools that keep their own login,
unless the downstream says it has none (`static_login=False`: the example downstreams, whose
tools are all minted theirs, D125). It may book through Lua functions, which the admin loads
into wakeful's library beside the runtime's own (state/library.py). Which downstreams there are is a setting
(WAKEFUL_DOWNSTREAMS, `module:attribute` of a tuple of Downstream), read like the app is: the
downstreams' code lives beside the apps that call them, above every runtime layer.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from wakeful.core import ids
from wakeful.core.errors import ConfigError
from wakeful.core.kafka_downstream import KafkaDownstream
from wakeful.state.functions import Function

ENV = "WAKEFUL_DOWNSTREAMS"
EXAMPLE = "wakeful.examples.downstreams:DOWNSTREAMS"
USER = re.compile(r"[a-z][a-z0-9-]{0,30}")
# Each downstream's keys: its own prefix, then anything (`bank:*`); never the runtime's `wk:`.
PATTERN = re.compile(r"[a-z][a-z0-9-]{0,30}:\*")
COMMAND = re.compile(r"\+[a-z]+(\|[a-z]+)?")
Entries = Callable[[redis.Redis, str | None], list[dict[str, Any]]]


@dataclass(frozen=True)
class Downstream:
    """One downstream system: its Redis user, the one key pattern and the commands it may use, the
    Lua functions it books with, and (optionally) how an operator lists what it booked.
    `static_login`: whether a static user with a password on disk is made for it, for tools that
    keep their own login; False when every tool that calls it is minted a user per step."""

    user: str
    pattern: str
    commands: tuple[str, ...]
    functions: tuple[Function, ...] = ()
    entries: Entries | None = field(default=None, compare=False)  # `wakeful ledger`: (admin, task or None)
    static_login: bool = True

    def problems(self, taken: frozenset[str]) -> list[str]:
        found = []
        if not USER.fullmatch(self.user) or self.user in taken:
            found.append(
                f"user {self.user!r}: lowercase letters, digits and '-', and no role's or other's name"
            )
        if not PATTERN.fullmatch(self.pattern) or self.pattern.startswith("wk:"):
            found.append(
                f"{self.user}: pattern {self.pattern!r} must be `<prefix>:*` outside wakeful's `wk:`"
            )
        bad = [c for c in self.commands if not COMMAND.fullmatch(c) or c in ("+eval", "+function")]
        if bad or not self.commands:
            found.append(f"{self.user}: commands {bad or '()'} must be one or more `+command` rights, no Lua")
        return found


def op_record(tag: str, kind: str, op_key: str) -> str:
    """A downstream's key for one operation's record: `<tag>:<kind>:<op key>`, the op key checked."""
    return f"{tag}:{kind}:{ids.checked(ids.OP_KEY_RE, op_key, 'op key')}"


def task_record(tag: str, kind: str, task_id: str) -> str:
    """A downstream's key for what it keeps per task (a fence, a fault hook), the task id checked."""
    return f"{tag}:{kind}:{ids.checked(ids.TASK_ID_RE, task_id, 'task id')}"


@functools.lru_cache(maxsize=8)
def load(spec: str, roles: frozenset[str] = frozenset()) -> tuple[Downstream, ...]:
    """The Redis downstreams `spec` (`module:attribute`) names (its Kafka ones: kafka()), all
    checked: every problem at once, as a ConfigError naming the setting. `roles`: the runtime's own
    users, which no downstream may take."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(
            ENV, f"{spec!r} is not module:attribute (e.g. wakeful.examples.downstreams:DOWNSTREAMS)"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(ENV, f"cannot import {module_name!r} for downstreams {spec!r}: {exc}") from exc
    found = getattr(module, attribute, None)
    if not isinstance(found, tuple) or not all(isinstance(d, Downstream | KafkaDownstream) for d in found):
        raise ConfigError(
            ENV, f"{spec!r} is {type(found).__name__}, not a tuple of Downstream and KafkaDownstream"
        )
    problems, taken = [], set(roles)
    for downstream in found:
        problems += downstream.problems(frozenset(taken))
        taken.add(downstream.user if isinstance(downstream, Downstream) else downstream.name)
    if problems:
        raise ConfigError(ENV, "; ".join(problems))
    return tuple(d for d in found if isinstance(d, Downstream))


@functools.lru_cache(maxsize=8)
def kafka(spec: str) -> tuple[KafkaDownstream, ...]:
    """The Kafka downstreams among those `spec` names (load() checks them all)."""
    load(spec)
    module_name, _, attribute = spec.partition(":")
    return tuple(
        d for d in getattr(importlib.import_module(module_name), attribute) if isinstance(d, KafkaDownstream)
    )
