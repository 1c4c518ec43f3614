"""What the ops page reads from Redis, as the admin (D76): indexes only, never a scan per request.

- Tasks by stage, waits by deadline: the task index the relay keeps (state/index.py), one sorted
  set per tenant and stage or wait kind; a page is one ZRANGE and one HMGET.
- Which tenants, stages and wait kinds there are, and the quarantine markers (which never reach the
  index): a sweep (`Sweep`) that SCANs for those keys in a thread of its own, every SWEEP_S, so no
  request waits on a scan; the page says when it last ran.
- The timer's deadlines: wk:deadlines, soonest first.
- Stuck: each unfinished stage's set read up to the age that makes a task stuck (ZRANGEBYSCORE),
  judged by `stuck_summary` as workflow/stuck.py judges a checkpoint.
- Tasks finished per minute: the finished stages' sets by last change, over the last hour.
A task's own page unseals its checkpoint (one task: the store's own read) and reads its action log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from wakeful.authority import freezes
from wakeful.core import ids, index_signing
from wakeful.core.errors import TaskNotFound, WakefulError
from wakeful.operate.client import Client, describe
from wakeful.operate.ops.sweep import Sweep, json_doc
from wakeful.schemas.logs import ActionLogEntry
from wakeful.sdk.app import App
from wakeful.sdk.workflow import CLOSED, NEEDS_REVIEW, QUARANTINED, RUNTIME_STAGES
from wakeful.state import keys, parked
from wakeful.state.index import Index
from wakeful.state.replies import hash_reply
from wakeful.workflow import engine
from wakeful.workflow.stuck import STUCK_AFTER_S, stuck_summary

SWEEP_S = 30.0  # how often the sweep looks for tenants, stages, wait kinds and quarantine markers
SCAN_COUNT = 10_000
ROWS = 50  # rows a list shows
FINISHED_READ = 100_000  # at most this many finished tasks counted per stage and hour


def engine_targets(wf: Any) -> set[str]:
    """The stages a workflow's transition table moves to."""
    return {to for targets in wf.stages.values() for to in targets}


def runtime_id(tenant: str, summary: dict[str, Any]) -> str:
    """The runtime's id of the task an index summary names (it names it as its tenant does)."""
    named = str(summary.get("task_id", ""))
    try:
        return ids.task_in(tenant, named)
    except ValueError:  # not an outside id: a task made before the namespaces keeps its own (D52)
        return named


def tenant_of_task(task_id: str) -> str:
    """The tenant whose namespace a runtime task id is in (state/index.py's rule)."""
    head, dot, _ = task_id.rpartition(".")
    return head if dot else ids.DEFAULT_TENANT


def finished_stages(app: App, stages: set[str]) -> set[str]:
    """The stages among `stages` where a task of `app` is done (closed, or a workflow's end)."""
    return {
        s
        for s in stages
        if s == CLOSED or any(engine.terminal(wf, s) and s != QUARANTINED for wf in app.workflows)
    }


def per_minute(times_ms: list[float], now_ms: float, minutes: int = 60) -> list[int]:
    """How many of `times_ms` fall in each of the last `minutes` minutes, oldest first."""
    counts = [0] * minutes
    for t in times_ms:
        ago = int((now_ms - t) // 60_000)
        if 0 <= ago < minutes:
            counts[minutes - 1 - ago] += 1
    return counts


class Reader:
    """The page's reads, through the admin's client (operate/client.py)."""

    def __init__(self, client: Client, sweep: Sweep, clock: Callable[[], float] = time.time) -> None:
        self.client, self.sweep, self.clock = client, sweep, clock
        self.admin, self.app = client.admin, client.app
        self.index = Index(client.admin, index_signing.load_keys(client.settings, "admin"))

    def counts(self) -> dict[str, dict[str, int]]:
        """tenant -> stage -> tasks, from the sets the sweep found (one pipelined round trip)."""
        pairs = [(t, s) for t, stages in sorted(self.sweep.found.stages.items()) for s in sorted(stages)]
        pipe = self.admin.pipeline(transaction=False)
        for tenant, stage in pairs:
            pipe.zcard(keys.index_stage(tenant, stage))
        out: dict[str, dict[str, int]] = {}
        for (tenant, stage), n in zip(pairs, pipe.execute() if pairs else [], strict=True):
            if n:
                out.setdefault(tenant, {})[stage] = int(n)
        return out

    def listed(
        self, tenant: str, stage: str, after: int = 0, app: str = ""
    ) -> tuple[list[dict[str, Any]], int | None]:
        rows, more = self.index.listed(tenant, stage=stage, limit=ROWS, after=after)
        if app:
            rows = [r for r in rows if self.app_of(str(r.get("workflow", ""))) == app]
        return rows, more

    def stages(self) -> set[str]:
        """Every stage of the loaded app's workflows, and the runtime's own."""
        return {s for wf in self.app.workflows for s in (*wf.stages, *engine_targets(wf))} | set(
            RUNTIME_STAGES
        )

    def app_of(self, workflow: str) -> str:
        """The loaded app's name when it runs `workflow`, else "" (another app's task)."""
        return self.app.name if self.app.workflow(workflow) is not None else ""

    def waiting(self) -> list[tuple[str, str, list[dict[str, Any]]]]:
        """(tenant, wait kind, the soonest ROWS tasks waiting for it) for every wait the sweep found."""
        return [
            (tenant, kind, self.index.listed(tenant, waiting=kind, limit=ROWS)[0])
            for tenant, kinds in sorted(self.sweep.found.waits.items())
            for kind in sorted(kinds)
        ]

    def deadlines(self) -> tuple[list[tuple[str, datetime]], int, int]:
        """The timer's soonest ROWS deadlines (task, when), how many it holds, how many are past."""
        now_ms = self.clock() * 1000
        pipe = self.admin.pipeline(transaction=False)
        pipe.zrange(keys.DEADLINES, 0, ROWS - 1, withscores=True)
        pipe.zcard(keys.DEADLINES)
        pipe.zcount(keys.DEADLINES, "-inf", now_ms)
        soonest, total, past = pipe.execute()
        rows = [
            (m.decode("utf-8", "replace").partition("|")[0], datetime.fromtimestamp(score / 1000, UTC))
            for m, score in soonest
        ]
        return rows, int(total), int(past)

    def stuck(self, older_than_s: float = STUCK_AFTER_S) -> list[dict[str, Any]]:
        """Tasks stuck for `older_than_s`, from each unfinished stage's set (oldest change first)."""
        now = datetime.now(UTC)
        cutoff = (self.clock() - older_than_s) * 1000
        held = {t.decode() for t in self.admin.smembers(keys.HELD_TASKS)}  # type: ignore[union-attr]
        out = []
        for tenant, stages in sorted(self.sweep.found.stages.items()):
            for stage in sorted(stages - set(RUNTIME_STAGES) - finished_stages(self.app, stages)):
                ids_ = self.admin.zrangebyscore(
                    keys.index_stage(tenant, stage), "-inf", cutoff, start=0, num=ROWS
                )
                docs = self.admin.hmget(keys.index_tasks(tenant), ids_) if ids_ else []  # type: ignore[arg-type]
                for raw in docs:
                    doc = self.index.vouched(tenant, json_doc(raw))  # only what the relay signed (D93)
                    if doc is None:
                        continue
                    why = stuck_summary(
                        self.app, doc, now, older_than_s, held=runtime_id(tenant, doc) in held
                    )
                    if why is not None:
                        out.append(doc | {"id": runtime_id(tenant, doc), "tenant": tenant, "stuck": why})
        return out[: ROWS * 4]

    def review(self) -> list[dict[str, Any]]:
        """Tasks parked for a person (needs_review), newest first, each with its last refusal. Read
        as `parked.read` reads: a record that fails its check is said, and nothing is written."""
        out = []
        for tenant in sorted(self.sweep.found.stages):
            rows, _ = self.index.listed(tenant, stage=NEEDS_REVIEW, limit=ROWS)
            for row in rows:
                task_id = runtime_id(tenant, row)
                try:
                    cp, _ = parked.read(self.client.store, task_id)
                    reason = (cp.business.last_refusal or "") if cp else "(its record does not verify)"
                except (WakefulError, ValueError) as exc:
                    reason = f"(cannot read the task: {exc})"
                out.append(row | {"id": task_id, "tenant": tenant, "reason": reason})
        return out

    def finished_per_minute(self, minutes: int = 60) -> list[int]:
        now_ms = self.clock() * 1000
        since = now_ms - minutes * 60_000
        pipe = self.admin.pipeline(transaction=False)
        for tenant, stages in sorted(self.sweep.found.stages.items()):
            for stage in sorted(finished_stages(self.app, stages)):
                pipe.zrangebyscore(
                    keys.index_stage(tenant, stage),
                    since,
                    now_ms,
                    withscores=True,
                    start=0,
                    num=FINISHED_READ,
                )
        times = [score for reply in (pipe.execute() if len(pipe) else []) for _, score in reply]
        return per_minute(times, now_ms, minutes)

    def task(self, task_id: str) -> dict[str, Any]:
        """One task for its page: the index's summary, the checkpoint's fields, its quarantine
        marker, its action log, the freeze that holds it and whether it has held work. ValueError for
        an id that is not a task id; a task nobody knows gives {"missing": True}."""
        ids.checked(ids.TASK_ID_RE, task_id, "task id")
        tenant = tenant_of_task(task_id)
        summary = self.index.task(tenant, task_id)
        try:
            cp, marker = parked.read(self.client.store, task_id)
        except TaskNotFound:  # no checkpoint: a marker (or the index) may still know it
            cp, marker = None, self.client.store.quarantine_reason(task_id)
        shown: dict[str, Any] = {"id": task_id, "tenant": tenant, "summary": summary, "quarantine": marker}
        if cp is None and summary is None and marker is None:
            return shown | {"missing": True}
        if cp is not None:
            shown["checkpoint"] = describe(cp)
        raw = self.admin.hgetall(keys.ops(task_id))
        actions = []
        for op, entry in hash_reply(raw).items():
            try:
                actions.append(ActionLogEntry.decode(entry).model_dump(mode="json"))
            except WakefulError as exc:  # shown as it is: the page is for looking at damage too
                actions.append({"op_key": op.decode("utf-8", "replace"), "status": f"unreadable: {exc}"})
        shown["actions"] = actions
        workflow = cp.business.workflow if cp is not None else str((summary or {}).get("workflow", ""))
        shown["app"] = self.app_of(workflow)
        frozen = self.client.authority.frozen()
        shown["freeze"] = freezes.holding(frozen, shown["app"] or "-", tenant, task_id)
        shown["held"] = bool(self.admin.sismember(keys.HELD_TASKS, task_id))
        return shown
