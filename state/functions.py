"""Lua in Redis as one function library that the admin loads and the roles only call.

No role may run Lua of its own choosing (EVAL, SCRIPT LOAD, FUNCTION LOAD are not in its ACL
rules): the admin loads `LIBRARY` with FUNCTION LOAD REPLACE (`wakeful dev up`, `wakeful admin acl
--apply`), and a role calls a function by name with FCALL, one round trip like EVALSHA. A function
runs with the caller's rights: FCALL's keys must fit one of the role's selectors, and every command
inside is checked against the role's ACL user as if the role had sent it (docs/decisions.md D31).

Each module keeps its functions' Lua beside the code that reads their replies (state/lease.py,
state/actions.py, bank/ledger.py), written as the body of `function(KEYS, ARGV)`; state/library.py
puts them together. The version is in the library's name and in every function's name, so a
library of another version never answers for this one: change any Lua, bump VERSION.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from wakeful.core.retry import FunctionsMissing, SlotMoved
from wakeful.state.pinned import Pinned

VERSION = 12
LIBRARY = f"wakeful_v{VERSION}"
FIX = "run `wakeful dev up` (local stack) or `wakeful admin acl --apply` (your own Redis) to load it"
_NOT_FOUND = "Function not found"


@dataclass(frozen=True)
class Function:
    """One Lua function of the library: `body` runs as `function(KEYS, ARGV) ... end`."""

    name: str  # without the library's prefix
    body: str
    # Redis 7 function flags. Without "allow-oom" a function is refused while Redis is over its
    # memory limit (the caller retries), even before it writes; give it only to functions that
    # never grow memory. "no-writes" lets FCALL_RO call it.
    flags: tuple[str, ...] = ()

    @property
    def qualified(self) -> str:
        """The name Redis knows it by: a Redis function name is global, so it carries the version."""
        return f"{LIBRARY}_{self.name}"


Arg = str | int | bytes


def call(client: redis.Redis, function: Function, keys: Sequence[str], args: Sequence[Arg]) -> Any:
    """FCALL the function: one round trip, sent as a batch of one on a connection of the pool that
    serves its keys (redis-py's own command path costs more than the call). A library that is not
    there raises FunctionsMissing; any other error reply is raised as redis-py raises it."""
    if keys:
        try:
            with Pinned(client, keys[0]) as pinned:
                (value,) = pinned.batch([command(function, keys, args)])
            return reply(function, value)
        except SlotMoved:  # not run: a cluster in flux, whose MOVED and ASK redis-py follows itself
            pass
    try:
        return client.fcall(function.qualified, len(keys), *keys, *args)
    except redis.ResponseError as exc:
        raise _missing(function, exc) from exc


def command(function: Function, keys: Sequence[str], args: Sequence[Arg]) -> tuple[Arg, ...]:
    """The FCALL as a command, to ride in a batch with others instead of a round trip of its own."""
    return ("FCALL", function.qualified, len(keys), *keys, *args)


def reply(function: Function, value: Any) -> Any:
    """The value of a batched FCALL (`command`), raising what `call` would have raised."""
    if isinstance(value, redis.ResponseError):
        raise _missing(function, value) from value
    return value


def raise_if_missing(function: Function, value: Any) -> None:
    """FunctionsMissing if a batched FCALL's reply says the library is not there (a Retry: the
    caller waits for an operator to load it); any other reply, error or not, is the caller's."""
    if isinstance(value, redis.ResponseError) and str(value).startswith(_NOT_FOUND):
        raise _missing(function, value)


def _missing(function: Function, exc: redis.ResponseError) -> Exception:
    if str(exc).startswith(_NOT_FOUND):
        return FunctionsMissing(LIBRARY, f"Redis has no function {function.qualified}; {FIX}")
    return exc
