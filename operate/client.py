"""What the CLI, the demo and the bench do as an upstream system and as an operator.

Upstream actions are signed events published to wakeful.events with a principal's key from the
local keystore ($WAKEFUL_HOME/signers); their outcome is read back from the event's receipt.
Operator reads use the admin Redis user.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import orjson

from wakeful.authority import documents, revocations, signer_seal
from wakeful.authority.kept import moved
from wakeful.authority.limit_store import DEFAULT_SCOPE, LimitStore, tool_scope, workflow_scope
from wakeful.authority.policy_store import PolicyStore
from wakeful.authority.schedule_store import ScheduleStore
from wakeful.authority.snapshot import DEFAULT_CATALOG, DEFAULT_COMPAT, DEFAULT_POLICY, check_signer
from wakeful.authority.store import AuthorityStore
from wakeful.authority.tool_store import ToolStore
from wakeful.client import Upstream, keystore, local_signer
from wakeful.consumers.kafka import wiring
from wakeful.core import ids, kafka_auth
from wakeful.core.errors import TaskNotFound, WakefulError
from wakeful.core.ids import DEFAULT_TENANT
from wakeful.core.kafka_rights import UPSTREAM
from wakeful.core.settings import Settings
from wakeful.operate import dev_signers as dev
from wakeful.operate import looking, reach
from wakeful.producers.keys import generate_secret, generate_signer, load_secret, load_signer, public_bytes
from wakeful.producers.publish import ConfluentPublisher
from wakeful.producers.signing import Ed25519Signer
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.logs import UNDO_PREFIX, ActionLogEntry
from wakeful.sdk.app import App, load_app
from wakeful.sdk.tools import Pending, published
from wakeful.sdk.workflow import CANCELLED, CLOSED, NEEDS_REVIEW, QUARANTINED
from wakeful.state import acl, budget, keys, parked
from wakeful.state.replies import hash_reply
from wakeful.workflow.stuck import stuck

REQUESTER = dev.REQUESTER  # the dev requester: the principal upstream actions sign as by default
DEPLOYER = "wakeful-deploy"  # who publishes an app's tool catalog when nobody names themselves
RECEIPT_S = 30.0  # how long a sender waits for its event's receipt by default
INIT = "wakeful authority init"  # who deployed an app's own policy as its first version
OWN_POLICY = "the app's own policy text (App.policy)"


class TimedOut(WakefulError):
    """No outcome arrived in time; are the workers running (`wakeful worker all`)?"""


class Client:
    """Needs a running stack: a missing one is a one-line ServerUnavailable that says how to start it
    (build it after `stack.up()` in a command that starts the stack itself)."""

    def __init__(self, settings: Settings) -> None:
        reach.require_redis(settings)
        self.settings = settings
        self.admin = acl.connect(settings, "admin")
        self.authority = AuthorityStore(self.admin, signer_seal.held(settings, signer_seal.KEEPER))
        self.tools = ToolStore(self.admin)
        self.schedules = ScheduleStore(self.admin)  # the SDK's `wakeful schedule ...` (D104)
        self.limits = LimitStore(self.admin)  # `wakeful authority limits ...` (D108)
        self.policies = PolicyStore(self.admin)
        self.store = wiring.store_for(settings, "admin")
        self._publisher: ConfluentPublisher | None = None
        self._connected: set[str] = set()  # the app's tools connected for their lookups
        self._upstreams: dict[str, Upstream] = {}

    @property
    def publisher(self) -> ConfluentPublisher:
        if self._publisher is None:
            reach.require_kafka(self.settings)
            # Upstream actions are published as the upstream principal: it may write wakeful.events only.
            security = kafka_auth.client_config(self.settings, UPSTREAM)
            self._publisher = ConfluentPublisher(self.settings.kafka_bootstrap, security=security)
        return self._publisher

    @cached_property
    def app(self) -> App:
        """The app this client drives (Settings.app, else $WAKEFUL_APP, else the bundled one)."""
        return load_app(self.settings.app)

    # ---- operator setup -----------------------------------------------------------------------

    def keystore(self) -> Path:
        return keystore(self.settings)

    def signer(self, principal: str) -> Ed25519Signer:
        return local_signer(self.settings, principal)

    def add_signer(
        self,
        principal: str,
        kinds: tuple[str, ...],
        tenant: str = DEFAULT_TENANT,
        keep: frozenset[str] = frozenset(),
    ) -> str:
        """Create (or reuse) `principal`'s key and register it for `kinds`, each known to the app, and
        for `keep`: kinds it is registered for already (perhaps under another app)."""
        if not re.fullmatch(ids.KEY_ID, f"key-{principal}"):
            raise WakefulError(f"{principal[:60]!r} is not a principal name ({ids.KEY_ID} after 'key-')")
        check_signer(
            kinds, self.app.kinds | {events.SIGNOFF}, tenant
        )  # before a key file is made for nothing
        path = self.keystore() / f"{principal}.key"
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        signer = (
            load_signer(f"key-{principal}", path)
            if path.exists()
            else generate_signer(f"key-{principal}", path)
        )
        material, registered = public_bytes(signer), tuple(sorted({*kinds, *keep}))
        known = self.app.kinds | keep | {events.SIGNOFF}  # a release owner's key signs no event (D121)
        self.authority.register_signer(
            signer.key_id, principal, "ed25519", material, registered, known=known, tenant=tenant
        )
        return signer.key_id

    def add_hmac_signer(
        self, principal: str, kinds: tuple[str, ...], tenant: str = DEFAULT_TENANT
    ) -> tuple[str, Path]:
        """Create (or reuse) `principal`'s HMAC secret, for webhooks (schemas/webhook.py), and register
        it for `kinds` as key `hmac-<principal>`: (the key id, the secret file's path)."""
        key_id = f"hmac-{principal}"
        if not re.fullmatch(ids.KEY_ID, key_id):
            raise WakefulError(f"{principal[:60]!r} is not a principal name ({ids.KEY_ID} after 'hmac-')")
        check_signer(kinds, self.app.kinds, tenant)
        path = self.keystore() / f"{principal}.hmac"
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        signer = load_secret(key_id, path) if path.exists() else generate_secret(key_id, path)
        self.authority.register_signer(
            key_id, principal, "hmac-sha256", signer.secret, kinds, known=self.app.kinds, tenant=tenant
        )
        return key_id, path

    def init_authority(self) -> bool:
        """Idempotent defaults for a local stack: limit, approvers, and a dev signer for every principal
        the app needs, for every kind it may send (a registered one missing a kind gets it). True if
        it wrote."""
        wrote = False
        revoked = self.authority.revoked()
        for principal, kinds in dev.dev_signers(self.app).items():
            found = self.authority.signer(f"key-{principal}")
            if found is not None and kinds <= found[1]:
                continue
            if revocations.name(DEFAULT_TENANT, principal) in revoked:
                continue  # revoked: only `wakeful authority signers unrevoke` gives it a key again
            # A registered signer keeps its tenant and its kinds, even those of another app.
            tenant, had = (found[0].tenant, found[1]) if found else (DEFAULT_TENANT, frozenset[str]())
            self.add_signer(principal, tuple(sorted(kinds)), tenant, had)
            wrote = True
        wrote = self.publish_tools(DEPLOYER) or wrote
        if self.app.policy and self.policies.version(self.app.name) is None:
            self.policies.deploy(self.app.name, self.app.policy, by=INIT, reason=OWN_POLICY)
            wrote = True
        if self.authority.initialised():
            return wrote
        self.authority.set_limit(1000)
        for approver in dev.DEFAULT_APPROVERS:
            self.authority.add_approver(approver)
        self.authority.set_policy()
        return True

    def reset_authority(self) -> None:
        """The local defaults, restored even where a test or an operator changed them: limit 1000,
        approvers alice and bob (shared, and the app's own), the app's own policy text in force (a
        new version if another is), the deployed tool catalog, pin/quarantine rules, no operator
        rules for one app, nothing frozen or revoked, no default in-flight limit and no rate on the
        app's tools."""
        self.init_authority()
        name = self.app.name
        self.admin.delete(keys.auth_approvers(name), keys.auth_limit(name))  # back to the shared ones
        self.authority.set_limit(1000)
        for approver in dev.DEFAULT_APPROVERS:
            self.authority.add_approver(approver)
        self.authority.set_policy(DEFAULT_POLICY, DEFAULT_CATALOG, dict(DEFAULT_COMPAT))
        current = self.policies.version(name)
        if self.app.policy and current is not None and current.digest != documents.digest(self.app.policy):
            self.policies.deploy(name, self.app.policy, by="wakeful reset", reason=OWN_POLICY)
        self.authority.forget_app_rules()
        for scope in self.authority.frozen():
            self.authority.thaw(scope, "wakeful", "local defaults restored")
        self.authority.wake_held()
        self.admin.delete(keys.AUTH_REVOKED)
        # The default in-flight limit and this app's tools' and workflows' limits; a tenant's own
        # limit stays (tests and benches that share a stack each hold tenants of their own, and
        # lift their own).
        mine = (tool_scope(name, ""), workflow_scope(name, ""))
        stale = [s for s in self.limits.all() if s == DEFAULT_SCOPE or s.startswith(mine)]
        if stale:
            self.admin.hdel(keys.AUTH_LIMITS, *stale)
        moved(self.admin)  # the deletes above went around the store: say authority changed
        known = self.tool_names()
        for switch in self.tools.switches().values():
            if switch.app == self.app.name:
                self.tools.enable(switch.app, switch.tool, by=DEPLOYER, reason="local defaults", known=known)

    def publish_tools(self, by: str) -> bool:
        """Publish the app's tool catalog to the authority store (D57); True if it changed."""
        return self.tools.publish(self.app.name, self.app.catalog, published(self.app.tools), by)

    def tool_names(self) -> frozenset[str]:
        """The app's tools as this client loads them and as they were published (an older deploy's
        may still run): the names a switch may name."""
        doc = self.tools.catalog(self.app.name) or {}
        return frozenset(t.name for t in self.app.tools) | {str(t["name"]) for t in doc.get("tools", ())}

    # ---- upstream actions ---------------------------------------------------------------------

    def send(
        self,
        principal: str,
        kind: str,
        payload: dict[str, Any],
        *,
        task_id: str | None = None,
        correlation_id: str | None = None,
    ) -> events.SignedEvent:
        return self.upstream(principal).send(kind, payload, task_id=task_id, correlation_id=correlation_id)

    def upstream(self, principal: str) -> Upstream:
        """`principal` as an upstream system (wakeful.client), with its key from the keystore,
        sending on this client's publisher."""
        if principal not in self._upstreams:
            signer = self.signer(principal)
            self._upstreams[principal] = Upstream(
                signer, publisher=self.publisher, url=self.settings.ingress_url
            )
        return self._upstreams[principal]

    def create(
        self,
        payload: dict[str, Any],
        principal: str = REQUESTER,
        task_id: str | None = None,
        *,
        timeout: float = RECEIPT_S,
    ) -> tuple[str, dict[str, Any]]:
        """Publish a task.create with `payload` (its `workflow`, else the app's first) and read its
        receipt, waiting up to `timeout` seconds for it."""
        tenant = self.tenant_of(principal)
        named = ids.named_by(tenant, task_id) if task_id else f"t-{uuid.uuid4().hex[:12]}"
        outside(principal, tenant, task_id or named, named)
        event = self.send(principal, events.CREATE, payload, task_id=named)
        task_id = ids.task_in(tenant, named)  # the runtime's id: the principal's tenant's namespace
        return task_id, self.receipt(event.event_id, task_id, timeout, key_id=event.key_id)

    def new_task(
        self,
        amount: int,
        note: str | None = None,
        principal: str = REQUESTER,
        wait_s: int | None = None,
        *,
        timeout: float = RECEIPT_S,
    ) -> tuple[str, dict[str, Any]]:
        """A task of the bundled example app's shape: an amount in EUR, an optional note (kept as
        untrusted evidence) and an optional approval deadline in seconds."""
        payload: dict[str, Any] = {"amount": amount, "currency": "EUR"}
        if note:
            payload["note"] = note
        if wait_s:
            payload["wait_s"] = wait_s
        return self.create(payload, principal, timeout=timeout)

    def event(
        self,
        task_id: str,
        kind: str,
        payload: dict[str, Any],
        principal: str = REQUESTER,
        correlation_id: str | None = None,
        *,
        timeout: float = RECEIPT_S,
    ) -> dict[str, Any]:
        """Publish one signed event of any kind for a task (by its runtime id, or by the id the
        principal's tenant gave it) and read its receipt (waiting up to `timeout` for it)."""
        tenant = self.tenant_of(principal)
        named = ids.named_by(tenant, task_id)
        outside(principal, tenant, task_id, named)
        event = self.send(principal, kind, payload, task_id=named, correlation_id=correlation_id)
        # A task of the tenant's made before the namespaces has the id as sent (D52): its receipt too.
        scoped = ids.task_in(tenant, named)
        return self.receipt(
            event.event_id, scoped, timeout, key_id=event.key_id, legacy=named if named != scoped else None
        )

    def tenant_of(self, principal: str) -> str:
        """The tenant `principal`'s key signs for (the default one for a key not registered yet)."""
        found = self.authority.signer(f"key-{principal}")
        return found[0].tenant if found is not None else DEFAULT_TENANT

    def approve(self, task_id: str, by: str, version: int) -> dict[str, Any]:
        """Approve the task that `by`'s tenant calls task_id (or whose runtime id it is), answering
        its wait by correlation id when the task can be read here."""
        tenant = self.tenant_of(by)
        named = ids.named_by(tenant, task_id)
        waits = []
        # Its namespace's task, else the one with the id as sent (made before the namespaces, D52).
        for candidate in dict.fromkeys((ids.task_in(tenant, named), task_id)):
            try:
                cp = self.store.load(candidate)
            except (WakefulError, ValueError):
                continue  # the pipeline will say what is wrong with the task
            waits = [w for w in cp.execution.pending_waits if w.wait_for == "approval"]
            break
        corr = waits[0].correlation_id if waits else None
        return self.event(task_id, events.APPROVE, {"version": version}, by, corr)

    def amend(self, task_id: str, amount: int, principal: str = REQUESTER) -> dict[str, Any]:
        return self.event(task_id, events.AMEND, {"amount": amount}, principal)

    def reopen(self, task_id: str, principal: str = "ops-lead", wait_s: int | None = None) -> dict[str, Any]:
        return self.event(task_id, events.REOPEN, {"wait_s": wait_s} if wait_s else {}, principal)

    def cancel(
        self, task_id: str, reason: str, principal: str = REQUESTER, *, timeout: float = RECEIPT_S
    ) -> dict[str, Any]:
        return self.event(task_id, events.CANCEL, {"reason": reason}, principal, timeout=timeout)

    def run(self, task_id: str, principal: str = REQUESTER) -> dict[str, Any]:
        return self.event(task_id, events.RUN, {}, principal)

    def receipt(
        self,
        event_id: str,
        task_id: str | None = None,
        timeout: float = RECEIPT_S,
        *,
        key_id: str,
        legacy: str | None = None,
    ) -> dict[str, Any]:
        """The outcome of key_id's event event_id: in its task's slot (or in `legacy`'s, the id a task
        made before the namespaces has), or (refused before the task was known) global. An event id
        alone is no identity: another signer may have used it too."""
        deadline = time.monotonic() + timeout
        names = [keys.receipt(event_id, t, key_id=key_id) for t in (task_id, legacy) if t]
        names.append(keys.receipt(event_id, key_id=key_id))
        while time.monotonic() < deadline:
            pipe = self.admin.pipeline(transaction=False)  # not MGET: two slots on a cluster
            for name in names:
                pipe.get(name)
            for raw in pipe.execute():
                if isinstance(raw, bytes):
                    doc: dict[str, Any] = orjson.loads(raw)
                    return {"event_id": event_id, **doc}
            time.sleep(0.02)
        raise TimedOut(f"no outcome for event {event_id} after {timeout:.0f}s: are the workers running?")

    # ---- operator reads -----------------------------------------------------------------------

    def show(self, task_id: str) -> dict[str, Any]:
        """The task as an operator reads it: its layers, its action log, what each operation's
        downstream says it did (`effects`, asked of the app's own tools) and its model tokens."""
        quarantine = self.store.quarantine_reason(task_id)
        # A parked task stays readable: its sealed record, when it still verifies (gate 4 parks
        # sound tasks; a failed integrity check leaves nothing to trust).
        cp = parked.read(self.store, task_id)[0] if quarantine is not None else self.store.load(task_id)
        entries = {
            op.decode(): ActionLogEntry.decode(raw)
            for op, raw in hash_reply(self.admin.hgetall(keys.ops(task_id))).items()
        }
        actions = {op: entry.model_dump(mode="json") for op, entry in entries.items()}
        [used] = budget.tasks_tokens(self.admin, [task_id])  # what its model calls cost
        more = {
            "actions": actions,
            "effects": self.effects(entries),
            "model_tokens": "not a number (the counter is damaged)" if used is None else used,
        }
        if quarantine is None:
            assert cp is not None
            return describe(cp) | more
        if cp is None:
            return {"id": task_id, "stage": QUARANTINED, "quarantine": quarantine} | more
        return describe(cp) | {"stage": QUARANTINED, "parked_at": cp.stage, "quarantine": quarantine} | more

    def effects(self, entries: dict[str, ActionLogEntry]) -> dict[str, Any]:
        """op key -> what its downstream says the call under it did (the tool's lookup: None when it
        did nothing), for each operation of the task's run by a tool of this client's app. A tool
        this process cannot ask (no credential here, its downstream down) says why instead."""
        found: dict[str, Any] = {}
        for op, entry in entries.items():
            tool = self.app.tool(entry.tool) if entry.tool and not op.startswith(UNDO_PREFIX) else None
            if tool is None:
                continue
            try:
                if tool.name not in self._connected:
                    tool.connect(self.settings)
                    self._connected.add(tool.name)
                with looking.as_the_tool(self.settings, self.admin, tool):
                    did = tool.lookup(op)
            except Exception as exc:  # whatever the downstream's client raises: shown, never fatal
                found[op] = f"cannot ask {tool.name}: {type(exc).__name__}: {exc}"
                continue
            if isinstance(did, Pending):  # under way downstream: its answer comes later
                found[op] = {"pending": did.handle}
            else:
                found[op] = dict(did) if did is not None else None
        return found

    def wait_stage(self, task_id: str, stages: set[str], timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                shown = self.show(task_id)
            except TaskNotFound:
                if time.monotonic() > deadline:
                    raise
                shown = {"stage": None}
            if shown["stage"] in stages or time.monotonic() > deadline:
                return shown
            time.sleep(0.02)

    def wait_settled(self, task_id: str, timeout: float = 30.0) -> dict[str, Any]:
        return self.wait_stage(task_id, {CLOSED, QUARANTINED, NEEDS_REVIEW, CANCELLED}, timeout)

    def stored(
        self, only: Sequence[str] = ()
    ) -> Iterator[tuple[str, Checkpoint | WakefulError | dict[str, Any]]]:
        """Every stored task (or the tasks `only` names), in no order: its verified checkpoint, the
        error that makes it unreadable (no task of that id, for one named), or (a dict) the record
        of its quarantine. Reads only."""
        scanned = (
            keys.task_of(k.decode()) for k in self.admin.scan_iter(match=keys.PATTERN_STATE, count=1000)
        )
        for task_id in only or scanned:
            try:
                quarantine = self.store.quarantine_reason(task_id)
                yield task_id, (quarantine if quarantine is not None else self.store.load(task_id))
            except WakefulError as exc:
                yield task_id, exc

    def list_tasks(self) -> list[dict[str, Any]]:
        """Every task's checkpoint fields, oldest first. Not `show` per task: that also reads each
        task's action log and its downstream, which a store of many tasks cannot wait for."""
        rows = []
        for task_id, found in self.stored():
            if isinstance(found, Checkpoint):
                rows.append(describe(found))
            elif isinstance(found, WakefulError):
                rows.append({"id": task_id, "stage": "unreadable", "error": str(found)})
            else:
                rows.append({"id": task_id, "stage": QUARANTINED, "quarantine": found})
        return sorted(rows, key=lambda r: str(r.get("updated_at", "")))

    def stuck_tasks(self, older_than: timedelta) -> list[dict[str, Any]]:
        """The tasks stuck for `older_than` (workflow/stuck.py), each with why, oldest first: what
        list_tasks reads, and one read more, the tasks a freeze holds (the thaw wakes those)."""
        held = {t.decode() for t in cast(set[bytes], self.admin.smembers(keys.HELD_TASKS))}
        now, rows = datetime.now(UTC), []
        for task_id, found in self.stored():
            if not isinstance(found, Checkpoint):
                continue  # an unreadable or quarantined task is parked with its reason, not stuck
            why = stuck(self.app, found, now, older_than, held=task_id in held)
            if why is not None:
                rows.append(describe(found) | {"stuck": why})
        return sorted(rows, key=lambda r: str(r["updated_at"]))

    def close(self) -> None:
        for upstream in self._upstreams.values():
            upstream.close()  # its HTTP client; the publisher is this client's, closed below
        if self._publisher is not None:
            self._publisher.close()


def outside(principal: str, tenant: str, task_id: str, named: str) -> None:
    """WakefulError unless `named`, what principal's tenant calls task_id, is an id it may sign."""
    if not re.fullmatch(ids.OUTSIDE_TASK_ID, named):
        raise WakefulError(
            f"task {task_id} is not in the namespace of {principal}'s tenant {tenant}: a signer names "
            f"only its own tenant's tasks ({tenant}.<id>, or <id>: {ids.OUTSIDE_TASK_ID})"
        )


def describe(cp: Checkpoint) -> dict[str, Any]:
    b = cp.business
    return {
        "id": cp.task_id,
        "workflow": b.workflow,
        "stage": b.stage,
        "version": b.version,
        "state_version": cp.state_version,
        **b.data,
        "approval": b.approval.model_dump(mode="json") if b.approval else None,
        "last_refusal": b.last_refusal,
        "proposals_refused": cp.execution.attempts,  # in a row at this stage: the model is asked again
        "pending_waits": [w.model_dump(mode="json") for w in cp.execution.pending_waits],
        "external_refs": cp.external_refs,
        "versions": cp.versions.model_dump(mode="json", by_alias=True),
        "updated_at": cp.updated_at.isoformat(),
    }
