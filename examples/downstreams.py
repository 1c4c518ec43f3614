"""The downstream systems the example apps' tools call, kept in the stack's own Redis for local runs:
the refund's bank, the onboarding's supplier register and the support agent's shop
(WAKEFUL_DOWNSTREAMS names this tuple by default; state/downstreams.py says what the runtime does
with it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import redis

from wakeful.core.errors import DownstreamRefused, DownstreamUnavailable, FencedOff
from wakeful.core.kafka_downstream import KafkaDownstream
from wakeful.examples import bank, shop, suppliers_keys
from wakeful.examples.suppliers import Suppliers
from wakeful.sdk import ToolFenced, ToolRefused, ToolUnavailable


def outcomes(admin: redis.Redis, task_id: str | None) -> list[dict[str, object]]:
    """`wakeful ledger`: the register's registrations, payments and removals, or one task's."""
    return [e.model_dump(mode="json") for e in Suppliers(admin).entries(task_id)]


# The register's listing is given here, not in suppliers_keys: the register's code imports its keys.
REGISTER = replace(suppliers_keys.DOWNSTREAM, entries=outcomes)
# A downstream reached over Kafka (D123): a tool that declares `credential = "notices"` produces
# to its topic with a delegation token minted for its step, and may write nothing else.
NOTICES = KafkaDownstream("notices", writes=("wakeful-example.notices",))
DOWNSTREAMS = (bank.DOWNSTREAM, REGISTER, shop.DOWNSTREAM, NOTICES)


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
