"""Structured logs: one JSON object per line on stderr, with the bound context (role, task, ids).

Never pass secrets or evidence bodies as fields.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import orjson


class Log:
    def __init__(self, **bound: Any) -> None:
        self._bound = bound

    def bind(self, **more: Any) -> Log:
        return Log(**self._bound, **more)

    def __call__(self, event: str, **fields: Any) -> None:
        record = {"ts": round(time.time(), 3), "event": event, **self._bound, **fields}
        sys.stderr.buffer.write(orjson.dumps(record, default=str) + b"\n")
        sys.stderr.flush()
