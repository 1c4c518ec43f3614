"""The ops page's sweep (D76): which tenants, stages and wait kinds the task index has sets for, and
the quarantine markers (which never reach the index), found by SCAN in a thread of its own every
SWEEP_S, so that no request waits on a scan. It may also run one more refresh each round (the
log's tail, operate/ops/log.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import redis

from wakeful.core import ids
from wakeful.state import index, keys

SWEEP_S = 30.0  # how often the sweep looks for tenants, stages, wait kinds and quarantine markers
SCAN_COUNT = 10_000
MARKERS = 10_000  # quarantine markers read at most


@dataclass
class Swept:
    """What the last sweep found, and when (None: not run yet)."""

    at: datetime | None = None
    stages: dict[str, set[str]] = field(default_factory=dict)  # tenant -> stages with a set
    waits: dict[str, set[str]] = field(default_factory=dict)  # tenant -> wait kinds with a set
    quarantined: list[dict[str, Any]] = field(default_factory=list)  # {task_id, reason, detail, at}
    error: str = ""


def parse_index_key(name: str) -> tuple[str, str, str] | None:
    """(tenant, "stage"|"wait"|"tasks", stage or wait kind) of an index key, or None."""
    head = f"{keys.PREFIX}:index:{{"
    if not name.startswith(head) or "}:" not in name:
        return None
    tenant, _, rest = name[len(head) :].partition("}:")
    kind, _, what = rest.partition(":")
    if not ids.TENANT_RE.fullmatch(tenant) or kind not in ("stage", "wait", "tasks"):
        return None
    return tenant, kind, what


class Sweep:
    """Runs `sweep()` now and then every SWEEP_S in a daemon thread, until `stop()`."""

    def __init__(
        self, admin: redis.Redis, every: float = SWEEP_S, also: Callable[[], None] | None = None
    ) -> None:
        self.admin, self.every, self.also = admin, every, also
        self.also_error = ""
        self.found = Swept()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ops-sweep", daemon=True)

    def start(self) -> None:
        self.sweep()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while True:
            if self.also is not None:
                try:
                    self.also()  # the log's tail: after the first sweep, so the page answers at once
                except Exception as exc:  # a broker away, a secret missing: said on the page, never fatal
                    self.also_error = f"{type(exc).__name__}: {exc}"
                else:
                    self.also_error = ""
            if self._stop.wait(self.every):
                return
            try:
                self.sweep()
            except Exception as exc:  # the thread keeps sweeping whatever one round met
                self.found = Swept(at=datetime.now(UTC), error=f"{type(exc).__name__}: {exc}")

    def sweep(self) -> Swept:
        found = Swept(at=datetime.now(UTC))
        try:
            for raw in self.admin.scan_iter(match=keys.PATTERN_INDEX, count=SCAN_COUNT):
                parsed = parse_index_key(raw.decode("utf-8", "replace"))
                if parsed is None:
                    continue
                tenant, kind, what = parsed
                found.stages.setdefault(tenant, set())
                found.waits.setdefault(tenant, set())
                if kind == "stage" and keys.STAGE_RE.fullmatch(what):
                    found.stages[tenant].add(what)
                elif kind == "wait" and keys.WAIT_KIND_RE.fullmatch(what):
                    found.waits[tenant].add(what)
            names = list(self.admin.scan_iter(match=keys.PATTERN_QUARANTINE, count=SCAN_COUNT))
            markers = self._markers(names[:MARKERS])
            found.quarantined = sorted(markers, key=lambda m: str(m.get("at", "")), reverse=True)
        except redis.RedisError as exc:
            found.error = f"{type(exc).__name__}: {exc}"
        self.found = found
        return found

    def _markers(self, names: list[bytes]) -> list[dict[str, Any]]:
        pipe = self.admin.pipeline(transaction=False)
        for name in names:
            pipe.get(name)
        out = []
        for name, raw in zip(names, pipe.execute() if names else [], strict=True):
            task_id = keys.task_of(name.decode("utf-8", "replace"))
            doc = json_doc(raw) or {"reason": "unreadable marker"}
            out.append({"task_id": task_id, **{k: doc.get(k, "") for k in ("reason", "detail", "at")}})
        return out


json_doc = index.parsed  # the JSON object a Redis value holds, or None
