"""wakeful's Redis function library: every Lua function a role calls, loaded by the admin only.

    FUNCTION LOAD REPLACE <code>         admin, at `wakeful dev up` (every start) and `dev acl --apply`
    FCALL wakeful_v1_<name> ...           executor (leases, action log), bank (refund)
    FCALL wakeful_v1_library 0            executor: `wakeful worker` checks it before it starts

The library is persisted by Redis with the data (AOF and RDB), so a restarted Redis has it again.
`wakeful_v1_library` answers the digest of the rest of the code: a server that holds a library of
this name but other code (loaded by an older or newer build) is told apart, not called blindly.
"""

from __future__ import annotations

import hashlib

import redis

from wakeful.bank import ledger
from wakeful.core.retry import FunctionsMissing
from wakeful.state import actions, functions, lease
from wakeful.state.functions import FIX, Function, call

FUNCTIONS: tuple[Function, ...] = (*lease.FUNCTIONS, *actions.FUNCTIONS, *ledger.FUNCTIONS)
LIBRARY = functions.LIBRARY
CALLERS = ("executor",)  # the role process that calls them (also as "bank"); the gate holds no lease (D49)


def _register(function: Function) -> str:
    flags = ", ".join(f"'{flag}'" for flag in function.flags)
    return (
        f"redis.register_function{{function_name='{function.qualified}', flags={{{flags}}},\n"
        f"  callback=function(KEYS, ARGV)\n{function.body.strip()}\nend}}\n"
    )


_BODY = "".join(_register(f) for f in FUNCTIONS)
DIGEST = hashlib.sha256(f"{LIBRARY}\n{_BODY}".encode()).hexdigest()

# KEYS none; ARGV none. returns: the digest of the library's other functions, as loaded.
IDENTITY = Function("library", f"return '{DIGEST}'", ("no-writes",))

CODE = f"#!lua name={LIBRARY}\n{_BODY}{_register(IDENTITY)}"


def load(admin: redis.Redis) -> str:
    """Load (or replace) the library as the admin user; returns its name. Idempotent."""
    admin.function_load(CODE, replace=True)
    return LIBRARY


def check(client: redis.Redis) -> None:
    """Raise FunctionsMissing, naming the fix, unless Redis holds exactly this library. A role may
    call it: any selector that grants FCALL grants it without keys."""
    found = call(client, IDENTITY, [], [])
    if (found.decode() if isinstance(found, bytes) else found) != DIGEST:
        raise FunctionsMissing(LIBRARY, f"Redis holds another {LIBRARY} than this code's; {FIX}")
