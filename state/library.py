"""wakeful's Redis function library: every Lua function a role calls, loaded by the admin only.

    FUNCTION LOAD REPLACE <code>         admin, at `wakeful dev up` (every start) and `admin acl --apply`
    FCALL wakeful_v12_<name> ...          executor (leases, action log, a tool's calls per second),
                                          relay (the task index, its outbox trim), gate and timer
                                          (a tenant's in-flight limit: state/fair.py), a downstream
    FCALL wakeful_v12_library 0           each of them: `wakeful worker` checks it before it starts

The library holds the runtime's functions, then those of the downstreams the settings name
(state/downstreams.py: the example apps' bank and supplier register), in that order. It is persisted
by Redis with the data (AOF and RDB), so a restarted Redis has it again. `wakeful_v8_library`
answers the digest of the rest of the code: a server that holds a library of this name but other
code (loaded by an older or newer build, or for other downstreams) is told apart, not called blindly.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

import redis

from wakeful.core.retry import FunctionsMissing
from wakeful.core.settings import Settings
from wakeful.state import acl, actions, fair, functions, index, lease, memory, outbox, purge, rates
from wakeful.state.functions import FIX, Function, call

FUNCTIONS: tuple[Function, ...] = (
    *lease.FUNCTIONS,
    *actions.FUNCTIONS,
    *index.FUNCTIONS,
    *memory.FUNCTIONS,
    *outbox.FUNCTIONS,  # the relay's trim
    *purge.FUNCTIONS,  # the admin's (wakeful task purge)
    *fair.FUNCTIONS,  # the gate's admission and the timer's release (D108)
    *rates.FUNCTIONS,  # the executor's count of a tool's calls per second (D109)
)  # the runtime's own
LIBRARY = functions.LIBRARY
# The role processes that call them: the executor (also as a downstream), the relay (the task
# index, state/index.py, and memory's write door, state/memory.py), and the gate and the timer (a
# tenant's in-flight limit, state/fair.py; the gate holds no lease, D49).
CALLERS = ("executor", "relay", "gate", "timer")


@dataclass(frozen=True)
class Library:
    functions: tuple[Function, ...]  # every function but the identity, in load order
    digest: str  # of the library's name and the other functions' code
    identity: Function  # KEYS none; ARGV none. returns: the digest, as loaded
    code: str  # what FUNCTION LOAD is given


def _register(function: Function) -> str:
    flags = ", ".join(f"'{flag}'" for flag in function.flags)
    return (
        f"redis.register_function{{function_name='{function.qualified}', flags={{{flags}}},\n"
        f"  callback=function(KEYS, ARGV)\n{function.body.strip()}\nend}}\n"
    )


@functools.lru_cache(maxsize=8)
def build(extra: tuple[Function, ...] = ()) -> Library:
    """The library of the runtime's functions and `extra` (the downstreams'), in that order."""
    every = (*FUNCTIONS, *extra)
    body = "".join(_register(f) for f in every)
    digest = hashlib.sha256(f"{LIBRARY}\n{body}".encode()).hexdigest()
    identity = Function("library", f"return '{digest}'", ("no-writes",))
    return Library(every, digest, identity, f"#!lua name={LIBRARY}\n{body}{_register(identity)}")


def of(settings: Settings) -> Library:
    """The library for the downstreams the settings name (WAKEFUL_DOWNSTREAMS)."""
    return build(tuple(f for d in acl.downstreams_of(settings) for f in d.functions))


def load(admin: redis.Redis, settings: Settings) -> str:
    """Load (or replace) the library as the admin user; returns its name. Idempotent."""
    admin.function_load(of(settings).code, replace=True)
    return LIBRARY


def check(client: redis.Redis, settings: Settings) -> None:
    """Raise FunctionsMissing, naming the fix, unless Redis holds exactly this library. A role may
    call it: any selector that grants FCALL grants it without keys."""
    library = of(settings)
    found = call(client, library.identity, [], [])
    if (found.decode() if isinstance(found, bytes) else found) != library.digest:
        raise FunctionsMissing(LIBRARY, f"Redis holds another {LIBRARY} than this code's; {FIX}")
