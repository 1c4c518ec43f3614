"""Redis replies read the same whichever way they arrived (pure: no client)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def hash_reply(reply: object) -> dict[bytes, bytes]:
    """An HGETALL reply as a dict, whichever way it arrived: a dict (RESP3, or redis-py's own
    parsing) or a flat [field, value, ...] list (RESP2 over a raw connection)."""
    if isinstance(reply, dict):
        return reply
    if isinstance(reply, list):
        return dict(zip(reply[::2], reply[1::2], strict=True))
    raise TypeError(f"not an HGETALL reply: {type(reply).__name__}")


def named(asked: Sequence[tuple[str, object]], replies: Sequence[Any]) -> dict[str, Any]:
    """Each reply of a batch under the name its command was asked by, in the order asked: a read
    added or left out (an optional one) shifts no other's reply, as positions would."""
    names = [name for name, _ in asked]
    if len(set(names)) != len(names):
        raise ValueError(f"a batch asks two reads by one name: {names}")
    if len(replies) != len(asked):
        raise ValueError(f"{len(asked)} reads asked, {len(replies)} replies")
    return dict(zip(names, replies, strict=True))
