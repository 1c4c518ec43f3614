"""The downstream systems the example apps' tools call, kept in the stack's own Redis for local runs:
the refund's bank, the onboarding's supplier register and the support agent's shop
(WAKEFUL_DOWNSTREAMS names this tuple by default; state/downstreams.py says what the runtime does
with it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from wakeful.core.errors import DownstreamRefused, DownstreamUnavailable, FencedOff
from wakeful.examples import bank, shop, suppliers_keys
from wakeful.sdk import ToolFenced, ToolRefused, ToolUnavailable

DOWNSTREAMS = (bank.DOWNSTREAM, suppliers_keys.DOWNSTREAM, shop.DOWNSTREAM)


@contextmanager
def as_tool_errors() -> Iterator[None]:
    """A reference downstream's errors as the executor reads a tool's: try again later, failed for
    good, or stop (the lease has passed to another worker)."""
    try:
        yield
    except DownstreamUnavailable as exc:
        raise ToolUnavailable(str(exc)) from exc
    except DownstreamRefused as exc:
        raise ToolRefused(str(exc)) from exc
    except FencedOff as exc:
        raise ToolFenced(str(exc)) from exc
