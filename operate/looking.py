"""An operator's look at what a tool did (`wakeful task show`, operate/client.py): a tool that
declares `credential = "<downstream>"` (D120) has no login of its own outside a step, so the
admin makes it a user of that downstream for the one lookup and removes it after. A user the
process leaves behind (it was killed) has no record: the next minter to start removes it."""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator
from typing import Any

import redis

from wakeful.core.grants import PREFIX
from wakeful.core.minting import Credential, handed
from wakeful.core.settings import Settings
from wakeful.sdk.tools import Tool
from wakeful.state import acl, minted

LOOK_S = 60  # the most a lookup's user is meant to live


@contextlib.contextmanager
def as_the_tool(settings: Settings, admin: redis.Redis, tool: Tool[Any]) -> Iterator[None]:
    """Run a lookup of `tool` inside: handed a user of its downstream made for it (nothing for a
    tool that keeps its own credential)."""
    downstream = next((d for d in acl.downstreams_of(settings) if d.user == tool.credential), None)
    if tool.credential is None or downstream is None:
        yield
        return
    user, password = PREFIX + secrets.token_hex(12), secrets.token_urlsafe(24)
    admin.execute_command(*minted.setuser(user, password, minted.rules_of(downstream)))  # type: ignore[no-untyped-call]
    try:
        with handed(Credential(user, password, int(time.time() + LOOK_S) * 1000, f"{tool.name}:look")):
            yield
    finally:
        minted.end(admin, [user])
