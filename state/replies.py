"""Redis replies read the same whichever way they arrived (pure: no client)."""

from __future__ import annotations


def hash_reply(reply: object) -> dict[bytes, bytes]:
    """An HGETALL reply as a dict, whichever way it arrived: a dict (RESP3, or redis-py's own
    parsing) or a flat [field, value, ...] list (RESP2 over a raw connection)."""
    if isinstance(reply, dict):
        return reply
    if isinstance(reply, list):
        return dict(zip(reply[::2], reply[1::2], strict=True))
    raise TypeError(f"not an HGETALL reply: {type(reply).__name__}")
