"""A receipt: what happened to one event, for its sender. Written by the gate and by inbound.

Its size is bounded whatever the event carried: a reason can quote the sender's own input (an
amount, a kind), and a receipt lives for days.
"""

from __future__ import annotations

from typing import Any

import orjson

from wakeful.schemas.base import cut

REASON_MAX = 500  # characters of a reason kept in a receipt


def bounded(reason: str) -> str:
    """The reason, cut to REASON_MAX characters with a note of how much was left out."""
    return cut(reason, REASON_MAX)


def encode(status: str, reason: str, task_id: str | None, by: str, **more: Any) -> bytes:
    """The stored receipt document (JSON), its reason bounded."""
    return orjson.dumps({"status": status, "reason": bounded(reason), "task_id": task_id, "by": by, **more})
