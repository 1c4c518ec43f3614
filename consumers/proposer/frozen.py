"""The proposer honours freezes: a frozen task's request gets no model call and spends no tokens.

The gate asks nothing for a frozen task, but a request it made before the freeze was taken in can
still be waiting on wakeful.proposals.request (a backlog, a proposer that was down). The proposer
reads the freezes live before each model call (one HGETALL of a hash that is empty unless something
is frozen) and, for a task one of them holds, answers nothing: it marks the task in `wk:held`, as
the gate and executor mark a task whose wake or step a freeze held, and the thaw wakes every marked
task (a deadline due now, through the timer), whose gate then asks again under the same request id.
Nothing is dead-lettered, and the request's offset is stored: the mark is what moves the task on.

The mark is written, then the freezes read again. Still frozen: the thaw lifts the freeze after
that read and wakes marked tasks after the lift, so it wakes this one. Thawed in between: the thaw
may have woken its marked tasks before the mark, so the model is called as for a task never frozen
(the mark left over at worst wakes the task once more at a later thaw; docs/decisions.md D117).

Pure but for `Freezes`, the two reads and the one write, as the `proposer` Redis user (state/acl.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis

from wakeful.authority import freezes
from wakeful.authority.freezes import Freeze
from wakeful.core.ids import DEFAULT_TENANT
from wakeful.core.retry import Retry
from wakeful.state import keys


def holding(frozen: Mapping[str, Freeze], payload: Mapping[str, Any], task_id: str) -> Freeze | None:
    """The freeze that holds the request's task (freezes.holding), or None. The app and the tenant
    are the request's (the gate's, from the task it read): a request from a gate before the app was
    named in it (D117) is judged by its task's, tenant's and the fleet's freezes only, and the
    executor, which holds every frozen step, holds it under an app's."""
    app = payload.get("app")
    tenant = payload.get("tenant", DEFAULT_TENANT)
    return freezes.holding(frozen, app if isinstance(app, str) else "", str(tenant), task_id)


class Freezes:
    """The freezes as the proposer reads them, and the mark it leaves on a task it did not answer."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    READ = ("HGETALL", keys.AUTH_FROZEN)  # the first read, which rides with the budget's (D117)

    def holding(
        self, task_id: str, payload: Mapping[str, Any], first: Mapping[bytes, bytes] | None = None
    ) -> Freeze | None:
        """The freeze that holds the task now, with the task marked for the thaw; None (and no
        model call withheld) when none does, or when the one read first was lifted by the mark.
        `first`: the freezes as read already (READ's reply), else they are read here."""
        read = freezes.frozen_from(first) if first is not None else self._read()
        if holding(read, payload, task_id) is None:
            return None
        try:
            self.client.sadd(keys.HELD_TASKS, task_id)
        except redis.exceptions.NoPermissionError as exc:
            raise _no_rights(exc) from exc
        return holding(self._read(), payload, task_id)

    def _read(self) -> dict[str, Freeze]:
        try:
            return freezes.frozen_from(self.client.hgetall(keys.AUTH_FROZEN))
        except redis.exceptions.NoPermissionError as exc:
            raise _no_rights(exc) from exc


def _no_rights(exc: Exception) -> Retry:
    """A proposer user from before this release: waited out until an operator reloads the users."""
    return Retry(
        f"the proposer's Redis user may not read the freezes or mark a task held ({exc}): reload the "
        "users with `wakeful admin acl --apply` (or `wakeful dev up`)",
        after=1.0,
    )
