"""Every Redis key wakeful uses, and every TTL. No key prefix or TTL literal lives anywhere else.

Per-task keys share the hash tag `{<task_id>}`, so in Redis Cluster one task's keys live in one
slot and a task's transaction or script never crosses slots.

Every id that becomes part of a key name is checked twice: by the wire models at decode time
(schemas/events.py, a DecodeError the door dead-letters) and here, by every key builder (ValueError),
so no key is ever built from an unchecked part. The alphabets (core/ids.py) hold no brace, colon,
`|`, whitespace or control character, so a part can never close a hash tag, add a key segment or forge another
key's name (`wk:{X}:receipt:Y}:lease` was one), and their lengths are bounded, so an outsider cannot
make Redis hold a huge key for a week:

| part            | pattern                 | named in                                  |
|-----------------|-------------------------|-------------------------------------------|
| outside task id | [A-Za-z0-9_-]{1,64}     | (signed events only: task_in() scopes it) |
| task id         | [<tenant>.]<outside id> | wk:{T}:*, a downstream's fence and faults |
| event id        | [A-Za-z0-9_.-]{8,128}   | wk:seen:K:E, wk:{T}:receipt:K:E, ...      |
| correlation id  | [A-Za-z0-9_.-]{1,128}   | wk:corr:C                                 |
| key id (signer) | [A-Za-z0-9_.@-]{1,128}  | wk:seen:K:E, receipt keys                 |
| op key          | [A-Za-z0-9_.:-]{1,200}  | a downstream's records: bank:{ledger}:... |
| tenant          | [A-Za-z0-9_.-]{1,64}    | wk:tenant:N:spent, wk:tenant:N:tokens:D,  |
|                 |                         | wk:index:{N}:* (a hash tag)               |
| stage           | [a-z][a-z0-9_]{0,39}    | wk:index:{N}:stage:S                      |
| wait kind       | [A-Za-z0-9_.-]{1,64}    | wk:index:{N}:wait:K                       |
| app name        | [A-Za-z0-9_-]{1,64}     | wk:authority:app:{A}:* (a hash tag)       |
| UTC day         | [0-9]{8} (yyyymmdd)     | wk:tenant:N:tokens:D                      |

Each tenant names its tasks for itself: the runtime's id of the task a signer of tenant N calls X
is `N.X` (task_in()), and the default tenant's is X itself. An outside id holds no `.`, so no
tenant can name a task in another's namespace, and no two tenants' ids meet (docs/decisions.md D52).

Op keys (`<TOOL>:<task>:v<n>`) are the one part that may hold colons: they name the business
operation, and each downstream names them behind fixed prefixes no other key of its keyspace starts
with (`bank:{ledger}:entry:`), so a colon in one cannot reach another kind of key. Inside the task
keyspace op keys are hash fields of wk:{T}:ops, never key names.

| key               | type   | holds                                              | written by             |
|-------------------|--------|----------------------------------------------------|------------------------|
| wk:{T}:state      | string | the sealed checkpoint (state.seal)                 | gate, executor (CAS)   |
| wk:{T}:ctr        | stream | monotonic counter: last entry id <state_version>-1 | gate, executor: XADD   |
|                   |        | (XADD refuses an id that does not grow)            | only, never SET or DEL |
| wk:{T}:lease      | string | "<owner>:<fence>" with a PX ttl                    | executor: lease fns,   |
|                   |        |                                                    | DEL in its close (D49) |
| wk:{T}:fence      | string | fencing counter, INCR at every lease grant         | executor: lease fns    |
| wk:{T}:inbox      | set    | identities applied to this task (dedupe): outside  | gate, executor (CAS)   |
|                   |        | events ev:K:E, the runtime's own ids rt:<kind>:... |                        |
| wk:{T}:outbox     | stream | outbox records not yet on wakeful.log              | gate, executor; relay  |
| wk:{T}:ops        | hash   | op_key -> action-log entry (intent first)          | executor               |
| wk:{T}:quarantine | string | JSON {reason, detail, at}: the task never resumes  | gate, executor, admin; |
|                   |        |                                                    | timer (sweep) reads    |
| wk:{T}:memory     | stream | memory records the gate's changes remembered, for  | gate (XADD in CAS);    |
|                   |        | the write door (state/memory.py)                   | relay reads, deletes   |
| wk:{T}:evidence   | hash   | evidence name -> JSON {ref, source, excerpt}: a   | gate; admin (forget)   |
|                   |        | reference to the document and a short excerpt      |                        |
|                   |        | (plain untrusted text before D69)                  |                        |
| wk:outbox:dirty   | set    | task ids whose outbox may hold records             | gate, executor; relay  |
| wk:purge:pending  | set    | purged task ids whose tombstone outbox the relay   | admin (task purge)     |
|                   |        | has yet to drain (state/purge.py)                  |                        |
| wk:deadlines      | zset   | "<task_id>|<deadline ms>" scored by deadline ms    | gate, executor; timer  |
|                   |        |                                                    | removes                |
| wk:schedule:fired | zset   | schedule name scored by the ms of its newest tick  | timer: ZADD GT only    |
|                   |        | on wakeful.events (consumers/timer/schedules.py)   | (it never goes back)   |
| wk:schedule:claim:{N}:{ms} | string | which timer publishes tick ms of N (PX) | timer: SET NX          |
| wk:corr:{C}       | string | correlation id C -> "<tenant>|<task id>" of the    | gate, executor         |
|                   |        | wait it answers (a bare task id: written before    |                        |
|                   |        | the tenant was; corr_target())                     |                        |
| wk:seen:{K}:{E}   | string | key K's event E was accepted at the door (replay)  | inbound (TTL)          |
| wk:{T}:receipt:{K}:{E} | string | JSON outcome of key K's event E, task T | gate (in CAS), inbound |
| wk:receipt:{K}:{E}| string | the same, refused before its task was known        | inbound                |
| wk:authority:*    | mixed  | approvers, limit, signers, policy (authority/)     | admin only; roles read |
| wk:authority:{freeze}:* | mixed | frozen (hash scope -> who, why, when),     | admin only; roles read |
|                   |        | switched (a counter each freeze and thaw bumps),   |                        |
|                   |        | log (stream: every freeze and thaw, who, why),     |                        |
|                   |        | revoked (hash principal -> its revoked key, who,   |                        |
|                   |        | why, when), version (a random token every write to |                        |
|                   |        | authority sets anew: authority/kept.py)            |                        |
| wk:{T}:held       | list   | wakes a freeze held for the task, oldest first     | gate: push, replay, pop|
| wk:held           | set    | task ids with held work (thaw wakes each): a wake  | gate, executor,        |
|                   |        | or step a freeze held, or a proposal request the   | proposer: SADD; admin; |
|                   |        | proposer left unanswered (D117)                    | timer (sweep) reads    |
| wk:heldfloor:{P} | zset   | task id -> the offset on wakeful.wake partition P  | gate: ZADD NX at a    |
|                   |        | of its oldest held wake: the floor a change of P   | hold, ZREM at a drain;|
|                   |        | carries goes no lower (D115)                       | timer: mend           |
| wk:migrated:index-mac | string | set once the relay signed every summary of the | relay: SETNX, EXISTS   |
|                   |        | release before (state/index.py, D93)               | (never unset)          |
| wk:unreadable     | set    | task ids a worker could not open (a key its keyring | gate, executor: mark,  |
|                   |        | lacks); woken when a gate or executor starts (D88) | wake at start          |
| wk:journal:authority | string | digest of the authority copy last put on        | admin only             |
|                   |        | wakeful.authority (operate/recover/run.py)           |                        |
| wk:live           | hash   | "<role>:<process>" -> "<switched seen> <ms>": which | gate, executor         |
|                   |        | switches each live role has taken in (a freeze's   |                        |
|                   |        | acknowledgement)                                   |                        |
| wk:wordings       | hash   | "<app>:<digest>" -> JSON: a deployed tool wording  | gate, executor: HSETNX,|
|                   |        | (names, descriptions, egress), under the digest a  | HSET current at start, |
|                   |        | catalog stamp names; "<app>:current" -> the last   | HGET; admin            |
|                   |        | deployed (D119); "<app>:release" -> the parts of   |                        |
|                   |        | the release deployed last (D121)                   |                        |
| wk:{minted}:all   | hash   | minted user -> JSON: the step it was minted for    | minter; admin (revoke) |
|                   |        | (scope, tool, task, op key, fence, expiry), never  |                        |
|                   |        | its secret (state/minted.py, D120)                 |                        |
| wk:{minted}:due   | zset   | minted user -> when it ends (ms): the reaper's     | minter; admin (revoke) |
| wk:authority:{tools}:catalog | hash | app -> JSON: its published tool catalog | admin (tools publish) |
| wk:authority:{tools}:switches | hash | JSON [app, tool] -> JSON: who turned    | admin (tools disable, |
|                   |        | it off, when, why; no field: the tool is on        | enable); roles read    |
| wk:authority:{tools}:history | stream | every publish, disable and enable      | admin: XADD only       |
| wk:authority:releases | hash | "<app>:<digest>" -> JSON: a release proposed;  | admin (release propose,|
|                   |        | "<app>:<digest>:<role>:<principal>" -> JSON: one   | sign); gate, executor  |
|                   |        | owner's signed sign-off (state/releases.py, D121)  | read at start          |
| wk:authority:app:{A}:approvers | set | app A's approvers (Group "approvers") | admin only; roles read |
| wk:authority:app:{A}:limit | string | app A's approval limit (App A's limit)   | admin only; roles read |
| wk:authority:app:{A}:policy | hash | app A's policy index: version -> digest   | admin only; roles read |
| wk:authority:app:{A}:policies | hash | version -> JSON {app, version, text,  | admin only; roles read |
|                   |        | digest, by, at, reason}: never rewritten           | (authority/documents)  |
| wk:authority:app:{A}:rollouts | hash | workflow -> JSON: who gets its new     | admin (release rollout,|
|                   |        | version first: tenants, a share, rolled back (D122) | promote, rollback)     |
| wk:fair:{N}:flight | zset  | tenant N's tasks a limit admitted and not yet ended | gate (fair_take, after |
|                   |        | (closed, cancelled, parked) -> ms admitted: what   | a change), executor    |
|                   |        | the limit counts (workflow/limits.py, D108)        | (after a change);      |
|                   |        |                                                    | timer (fair_release)   |
| wk:fair:{N}:queue | zset   | tenant N's creates held over its limit -> ms they  | gate (fair_take);      |
|                   |        | came: the order they are let in                    | timer (fair_release)   |
| wk:fair:{N}:wflight:{W} | zset | tenant N's tasks of workflow W (a digest of app | gate (fair_take, after |
|                   |        | and workflow) admitted while a limit counts: what  | a change), executor    |
|                   |        | a workflow's limit counts (D112)                   | (after); timer         |
| wk:fair:{N}:wqueue:{W} | zset | tenant N's creates of workflow W held over its | gate (fair_take);      |
|                   |        | limit, or the tenant's, while W has a limit         | timer (fair_release)   |
| wk:fair:{N}:queues | set   | tenant N's queues with creates: "-" (its own) or a | gate (fair_take);      |
|                   |        | workflow's, as JSON [app, workflow]                | timer (fair_release)   |
| wk:fair:queued    | set    | tenants with a queue (the timer's look)            | gate: SADD; timer      |
| wk:rate:{D}       | string | a tool's next free call time (µs, by Redis's clock) | executor (rate_take)  |
|                   |        | under its calls-per-second limit; D: a digest of   |                        |
|                   |        | app and tool (state/rates.py, D109)                |                        |
| wk:slots:{D}      | zset   | a tool's calls running now: op key -> ms its slot  | executor (slot_take;   |
|                   |        | lapses (Redis's clock) unless the call's heartbeat | ZREM at the call's end)|
|                   |        | renews it (state/rates.py, D111)                   |                        |
| wk:authority:{limits}:* | mixed | all (hash scope -> JSON {max_in_flight, by,  | admin only; roles read |
|                   |        | at, reason}) and history (stream: every change)    |                        |
| wk:index:{N}:tasks | hash  | tenant N's task id -> its summary: stage, versions, | relay (index function) |
|                   |        | waits, the relay's MAC (served only if it verifies, | ingress, timer (sweep) |
|                   |        | D93); never the task's fields (state/index.py)     |                        |
|                   |        |                                                    | read                   |
| wk:index:{N}:stage:{S} | zset | tenant N's tasks at stage S, by last change  | relay; ingress, timer  |
|                   |        |                                                    | (sweep) read           |
| wk:index:{N}:wait:{K} | zset | tenant N's tasks waiting for K, by deadline   | relay; ingress reads   |
| wk:index:{N}:created | zset  | tenant N's tasks, by creation (ms; D107)        | relay; ingress reads   |
| wk:index:{N}:by:{F}:{H} | zset | tenant N's tasks whose F (`workflow`, or      | relay; ingress reads   |
|                   |        | `attr:<name>`) has the value of SHA-1 H, by creation |                        |
| wk:mem:{N.D}:records | hash | tenant N's memory about one subject (D: digest | relay (memory function)|
|                   |        | of the subject): record id -> MemoryRecord JSON    | admin (status, forget) |
|                   |        | (state/memory.py)                                  | gate reads (read door) |
| wk:ev:{N.D}:doc   | string | tenant N's evidence document with content digest  | gate (SET NX, EXPIRE   |
|                   |        | D: JSON {text, source, at}, EVIDENCE_TTL_S        | GT); admin (forget)    |
| wk:ev:{N.D}:tasks | set    | the tasks that hold an excerpt of it               | gate; admin (forget)   |
| wk:mem:forgotten  | stream | each forget: its source, who, when, what it took  | admin: XADD only       |
| wk:mem:{N.D}:gone | set   | ids of records forgotten or dropped: never written | admin, relay (memory   |
|                   |        | again by a late replay                             | function)              |
| wk:mem:{N}:refused | stream | candidates the write door refused, and why  | relay: XADD only       |
| wk:dlq:replays    | stream | each `wakeful dlq replay`: letter, by, reason, at, | admin: XADD only       |
|                   |        | what it did, the event identity (state/replays.py) | (no role reaches it)   |
| wk:ops:session:{D}| string | one ops page session (D: SHA-256 of its nonce):   | admin (`wakeful ops`): |
|                   |        | JSON {operator, client, started, ends}; TTL its    | SET at login, PEXPIRE  |
|                   |        | idle limit, never past its end                     | each page, DEL at      |
|                   |        | (operate/ops/sessions.py)                          | logout; no role reaches|
| wk:{T}:spent      | stream | model tokens the task's proposals used: top id     | proposer: XADD only    |
|                   |        | <tokens>-0 (state/budget.py)                       |                        |
| wk:tenant:{N}:spent | stream | tokens tenant N's tasks used: top id            | proposer: XADD only    |
|                   |        | <UTC day * DAY_SPAN + that day's tokens>-0         |                        |
| wk:{T}:tokens     | string | legacy: tokens counted before the streams          | admin moves it into    |
| wk:tenant:{N}:tokens:{D} | string | legacy: tenant N's tokens on UTC day D (TTL) | the stream, deletes it |

No per-task key has a TTL while its task lives: a waiting task must never be dropped by Redis.
The token counters have none either: a counter that could lapse could be made to lapse. The
counters from before the streams are moved into them by the admin (state/upgrades.py).

Every per-task ACL pattern starts `wk:{` and ends with the key's kind: braces are literal in a
Redis glob and no other key starts with `wk:{`, so a pattern for one kind of task key reaches no
key of another kind or outside the task keyspace (`wk:*:receipt:*` also matched a tenant named
"receipt"'s counter; `wk:*:state` matched a correlation id named "state").

The example apps' downstreams (their bank, supplier register and shop) keep keys of their own,
outside `wk:`, beside their code (wakeful.examples.bank, .suppliers, .shop; state/downstreams.py).
"""

from __future__ import annotations

import hashlib
import re

# The id alphabets and the task namespaces live in core/ids.py (the wire models check them too);
# every key builder here checks its parts against them.
from wakeful.core.ids import CORRELATION_ID_RE as _CORRELATION_ID
from wakeful.core.ids import DAY_RE as _DAY
from wakeful.core.ids import EVENT_ID_RE as _EVENT_ID
from wakeful.core.ids import KEY_ID_RE as _KEY_ID
from wakeful.core.ids import NAME_RE, checked
from wakeful.core.ids import TASK_ID_RE as _TASK_ID
from wakeful.core.ids import TENANT_RE as _TENANT

PREFIX = "wk"

# The default lease TTL (WAKEFUL_LEASE_TTL_MS overrides it): a worker that has not extended its
# lease for this long is presumed dead.
LEASE_TTL_MS = 15_000
# An accepted event id is remembered this long; an event that reached Kafka past its max age is
# refused anyway. A second copy that reached Kafka in time but is read more than this after the
# first (inbound stopped between them, D84) passes this guard: the task's inbox, in the gate's
# compare-and-swap, still keeps it from applying twice.
SEEN_TTL_S = 2 * 3600
SEEN_MARGIN_S = 600


def seen_ttl(max_age: float) -> int:
    """How long a seen mark lasts: SEEN_TTL_S, and at least the events' max age and a margin, so an
    event sent again before it is refused as stale still meets its mark."""
    return max(SEEN_TTL_S, int(max_age) + SEEN_MARGIN_S)


# Receipts are read by the sender shortly after it publishes; a week is plenty for late readers.
RECEIPT_TTL_S = 7 * 24 * 3600
# Bounded CAS retries before `Contention` is raised.
CAS_RETRIES = 8
# The outbox index is rebuilt by a SCAN over all outboxes this often, in case a writer died between
# its transaction and its SADD to the index.
OUTBOX_SWEEP_S = 60.0

OUTBOX_DIRTY = f"{PREFIX}:outbox:dirty"
DEADLINES = f"{PREFIX}:deadlines"
SCHEDULE_FIRED = f"{PREFIX}:schedule:fired"
PATTERN_SCHEDULE_CLAIM = f"{PREFIX}:schedule:claim:*"
SCHEDULE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")


def schedule_claim(name: str, tick_ms: int) -> str:
    """The key a timer sets (NX, with a ttl) before it publishes `name`'s tick at tick_ms."""
    return f"{PREFIX}:schedule:claim:{checked(SCHEDULE_NAME, name, 'schedule name')}:{int(tick_ms)}"


AUTHORITY = f"{PREFIX}:authority"
AUTH_APPROVERS = f"{AUTHORITY}:approvers"  # shared approvers: an app with none of its own reads it
AUTH_LIMIT = f"{AUTHORITY}:limit"  # shared approval limit: an app with none of its own reads it
# hash key_id -> JSON {principal, alg, kinds, tenant, and an Ed25519 public key in `material` or an
# HMAC secret `sealed` under the verifiers' seal (authority/signer_seal.py, D91); never a secret whole}
AUTH_SIGNERS = f"{AUTHORITY}:signers"
# hash: releases and their owners' sign-offs (state/releases.py, D121)
AUTH_RELEASES = f"{AUTHORITY}:releases"
AUTH_POLICY = f"{AUTHORITY}:policy"  # hash: policy, tool_catalog, compat (JSON), catalog (JSON)
# The freezes (authority/freezes.py): one hash tag, so a freeze, its record and the counter the
# roles acknowledge are written in one MULTI on a Redis Cluster too; no `wk:{` pattern reaches it.
_FREEZE = f"{AUTHORITY}:{{freeze}}"
AUTH_FROZEN = f"{_FREEZE}:frozen"  # hash scope (all, app:A, tenant:T, task:T) -> JSON {by, reason, at}
AUTH_SWITCHED = f"{_FREEZE}:switched"  # string int: bumped by every freeze and thaw
AUTH_SWITCH_LOG = f"{_FREEZE}:log"  # stream: each freeze and thaw, who, why, when
AUTH_REVOKED = f"{_FREEZE}:revoked"  # hash principal -> JSON {key, by, reason, at}: revoked signers
# A fresh random token set by every authority write, in the MULTI of a write in this slot, else
# after it: a role reuses its Snapshot while it reads the same token (authority/kept.py, D79).
AUTH_VERSION = f"{_FREEZE}:version"
# The tools' switches (authority/tool_store.py). One hash tag, so that a switch and its history
# record are written in one MULTI on a Redis Cluster too; it starts no `wk:{`, so no per-task
# pattern reaches it.
_TOOLS = f"{AUTHORITY}:{{tools}}"
AUTH_TOOL_CATALOG = f"{_TOOLS}:catalog"  # hash app -> JSON {catalog, published_at, by, tools}
AUTH_TOOL_SWITCHES = f"{_TOOLS}:switches"  # hash JSON [app, tool] -> JSON {by, at, reason}
AUTH_TOOL_HISTORY = f"{_TOOLS}:history"  # stream: {app, tool, action, by, reason, at}
# The schedules (authority/schedule_store.py): one hash tag, so a schedule and its history record
# are written in one MULTI on a Redis Cluster too. The timer reads them; operators write them.
_SCHEDULES = f"{AUTHORITY}:{{schedules}}"
AUTH_SCHEDULES = f"{_SCHEDULES}:all"  # hash name -> JSON schedule (workflow/schedules.py)
AUTH_SCHEDULE_HISTORY = f"{_SCHEDULES}:history"  # stream: {name, action, by, reason, at}
# The tenants' in-flight limits (authority/limit_store.py, D108): one hash tag, so a limit and its
# history record are written in one MULTI on a Redis Cluster too. Roles read them with the Snapshot.
_LIMITS = f"{AUTHORITY}:{{limits}}"
AUTH_LIMITS = f"{_LIMITS}:all"  # hash scope (tenant:N, default) -> JSON {max_in_flight, by, at, reason}
AUTH_LIMIT_HISTORY = f"{_LIMITS}:history"  # stream: {scope, action, max_in_flight, by, reason, at}
PATTERN_AUTHORITY = f"{AUTHORITY}:*"
HELD_TASKS = f"{PREFIX}:held"
WORDINGS = f"{PREFIX}:wordings"  # hash: each app's deployed tool wordings by digest (state/wording.py, D119)
# Per-step credentials (state/minted.py, D120): one hash tag, so a credential's record and its due
# time are one slot's on a Redis Cluster. The minter's alone (and the admin's, to revoke).
MINTED = f"{PREFIX}:{{minted}}:all"
MINTED_DUE = f"{PREFIX}:{{minted}}:due"
# Per partition of wakeful.wake, the offset of each task's oldest held wake (D115): one key each,
# so a gate's read of its batch's partitions is one command per partition.
PATTERN_HELD_FLOOR = f"{PREFIX}:heldfloor:{{*}}"


def held_floor(partition: int) -> str:
    if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < 1_000_000:
        raise ValueError(f"a partition is a whole number from 0, not {partition!r}")
    return f"{PREFIX}:heldfloor:{{{partition}}}"


UNREADABLE_TASKS = f"{PREFIX}:unreadable"
# The digest of the authority copy last published on wakeful.authority (operate/recover/run.py): admin only.
JOURNAL_AUTHORITY = f"{PREFIX}:journal:authority"
LIVE = f"{PREFIX}:live"
APP_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def auth_app(app: str) -> str:
    """The prefix of app `app`'s own authority keys (under PATTERN_AUTHORITY: roles read them).
    They share the hash tag {<app>}: a policy deploy's transaction stays in one cluster slot."""
    return f"{AUTHORITY}:app:{{{checked(APP_NAME, app, 'app name')}}}"


def auth_approvers(app: str) -> str:
    return f"{auth_app(app)}:approvers"


def auth_limit(app: str) -> str:
    return f"{auth_app(app)}:limit"


def auth_policy_index(app: str) -> str:
    return f"{auth_app(app)}:policy"


def auth_policies(app: str) -> str:
    return f"{auth_app(app)}:policies"


def auth_rollouts(app: str) -> str:
    """Hash workflow -> JSON: app `app`'s rollout of a workflow's new version (workflow/rollouts.py)."""
    return f"{auth_app(app)}:rollouts"


PATTERN_CORR = f"{PREFIX}:corr:*"
PATTERN_SEEN = f"{PREFIX}:seen:*"
# A receipt's name as a Redis glob, as near its shape as a glob comes: `receipt:`, a key id's first
# character, `:` after the rest of it, then an event id's first eight (ids.py: key ids and event ids
# hold no `:`, `{` or `}`). A glob's `*` also matches `:`, so a name with more after a real event id
# still matches; nothing reads such a name, and no other kind of key does (tests/unit/test_key_patterns).
# A class lists `-` first: Redis reads `@-]` as a range.
_RECEIPT_SHAPE = "receipt:[-A-Za-z0-9_.@]*:" + "[-A-Za-z0-9_.]" * 8 + "*"
PATTERN_RECEIPT = f"{PREFIX}:{_RECEIPT_SHAPE}"


def corr(correlation_id: str) -> str:
    return f"{PREFIX}:corr:{checked(_CORRELATION_ID, correlation_id, 'correlation id')}"


def corr_value(tenant: str, task_id: str) -> str:
    """What wk:corr:C holds: the tenant beside the task, so that the door can answer another
    tenant's signer as it answers an unknown correlation id, without the task id (never change)."""
    return f"{tenant}|{task_id}"


def corr_target(value: bytes) -> tuple[str | None, str]:
    """(tenant, task id) from what wk:corr:C holds; the tenant is None in a value written before it was."""
    tenant, _, task_id = value.decode().rpartition("|")
    return tenant or None, task_id


# Dedupe identities. Never change these formats: they are stored (wk:seen:*, wk:{T}:inbox, receipt
# keys), and a changed one lets an applied message apply again (docs/decisions.md D29). An outside
# event is (key id, event id): another signer's event with the same event id is another identity.
# What the runtime makes for itself is "rt:<kind>:...", which no outside identity ("ev:...") can be.


def event_identity(key_id: str, event_id: str) -> str:
    """The inbox member of an outside event (neither part holds a ':', so it splits one way)."""
    return f"ev:{key_id}:{event_id}"


def runtime_id(kind: str, *parts: str | int) -> str:
    """The inbox member of a message the runtime makes itself (close, deadline, refusal, review)."""
    return ":".join(("rt", kind, *map(str, parts)))


def seen(key_id: str, event_id: str) -> str:
    return f"{PREFIX}:seen:{checked(_KEY_ID, key_id, 'key id')}:{checked(_EVENT_ID, event_id, 'event id')}"


def receipt(event_id: str, task_id: str | None = None, *, key_id: str) -> str:
    """In the task's slot when the task is known, so a transition writes it in its own MULTI. The
    signer's key id is part of it: another signer's event with the same id has its own receipt."""
    name = f"receipt:{checked(_KEY_ID, key_id, 'key id')}:{checked(_EVENT_ID, event_id, 'event id')}"
    return _task(task_id, name) if task_id else f"{PREFIX}:{name}"


def task_receipt_prefix(task_id: str) -> str:
    """What every receipt key in the task's slot starts with."""
    return _task(task_id, "receipt:")


# ACL key patterns, one per per-task key kind (used by state.acl). Braces are literal in a Redis
# glob: only a hash-tagged task key matches, never wk:corr:state or wk:tenant:receipt:tokens:D.
PATTERN_TASK = f"{PREFIX}:{{*}}:"
PATTERN_STATE = f"{PATTERN_TASK}state"
PATTERN_CTR = f"{PATTERN_TASK}ctr"
PATTERN_LEASE = f"{PATTERN_TASK}lease"
PATTERN_FENCE = f"{PATTERN_TASK}fence"
PATTERN_INBOX = f"{PATTERN_TASK}inbox"
PATTERN_OUTBOX = f"{PATTERN_TASK}outbox"
PATTERN_OPS = f"{PATTERN_TASK}ops"
PATTERN_QUARANTINE = f"{PATTERN_TASK}quarantine"
PATTERN_EVIDENCE = f"{PATTERN_TASK}evidence"
PATTERN_TASK_MEMORY = f"{PATTERN_TASK}memory"
PATTERN_HELD = f"{PATTERN_TASK}held"
PATTERN_TASK_RECEIPT = f"{PATTERN_TASK}{_RECEIPT_SHAPE}"
PATTERN_TASK_SPENT = f"{PATTERN_TASK}spent"
PATTERN_TASK_TOKENS = f"{PATTERN_TASK}tokens"
PATTERN_TENANT_SPENT = f"{PREFIX}:tenant:*:spent"
PATTERN_TENANT_TOKENS = f"{PREFIX}:tenant:*:tokens:*"


def tenant_spent(tenant: str) -> str:
    """The stream whose top id counts the tokens tenant's tasks used, day by day (state/budget.py)."""
    return f"{PREFIX}:tenant:{checked(_TENANT, tenant, 'tenant')}:spent"


def tenant_tokens(tenant: str, day: str) -> str:
    """Legacy: tokens tenant's tasks used on UTC `day` (yyyymmdd), counted before the streams."""
    return f"{PREFIX}:tenant:{checked(_TENANT, tenant, 'tenant')}:tokens:{checked(_DAY, day, 'day')}"


def _task(task_id: str, kind: str) -> str:
    return f"{PREFIX}:{{{checked(_TASK_ID, task_id, 'task id')}}}:{kind}"


def state(task_id: str) -> str:
    return _task(task_id, "state")


def ctr(task_id: str) -> str:
    return _task(task_id, "ctr")


def lease(task_id: str) -> str:
    return _task(task_id, "lease")


def fence(task_id: str) -> str:
    return _task(task_id, "fence")


def inbox(task_id: str) -> str:
    return _task(task_id, "inbox")


def outbox(task_id: str) -> str:
    return _task(task_id, "outbox")


def ops(task_id: str) -> str:
    return _task(task_id, "ops")


def quarantine(task_id: str) -> str:
    return _task(task_id, "quarantine")


def evidence(task_id: str) -> str:
    return _task(task_id, "evidence")


def task_memory(task_id: str) -> str:
    return _task(task_id, "memory")


def held(task_id: str) -> str:
    return _task(task_id, "held")


def spent(task_id: str) -> str:
    return _task(task_id, "spent")


def tokens(task_id: str) -> str:
    """Legacy: the task's tokens counted before the streams (read only)."""
    return _task(task_id, "tokens")


def task_of(key: str) -> str:
    """The task id inside a per-task key name."""
    start, end = key.index("{") + 1, key.index("}")
    return key[start:end]


# The task index (state/index.py): each tenant's under its own hash tag, so that one function call
# moves a task between the tenant's sets on a Redis Cluster too.
PATTERN_INDEX = f"{PREFIX}:index:*"
PATTERN_INDEX_TASKS = f"{PREFIX}:index:{{*}}:tasks"  # every tenant's, for a purge to find them
# Set (SETNX) once the relay has signed every summary written before summaries were signed (D93).
INDEX_SIGNED = f"{PREFIX}:migrated:index-mac"
PURGE_PENDING = f"{PREFIX}:purge:pending"  # purged tasks whose tombstone waits on their outbox
STAGE_RE = re.compile(r"[a-z][a-z0-9_]{0,39}")
WAIT_KIND_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _index(tenant: str) -> str:
    return f"{PREFIX}:index:{{{checked(_TENANT, tenant, 'tenant')}}}:"


def index_tasks(tenant: str) -> str:
    return f"{_index(tenant)}tasks"


def index_stage(tenant: str, stage: str) -> str:
    return f"{_index(tenant)}stage:{checked(STAGE_RE, stage, 'stage')}"


def index_wait(tenant: str, kind: str) -> str:
    return f"{_index(tenant)}wait:{checked(WAIT_KIND_RE, kind, 'wait kind')}"


def index_created(tenant: str) -> str:
    return f"{_index(tenant)}created"


ATTRIBUTE_RE = NAME_RE  # a workflow's search attribute's name (D107)


def index_by(tenant: str, field: str, value: str) -> str:
    """The set of tenant's tasks whose `field` ("workflow", or "attr:<name>") is `value`: the value
    is named by its SHA-1 (the index function names it the same, redis.sha1hex), so no outside text
    is part of a key name."""
    if field != "workflow":
        checked(ATTRIBUTE_RE, field.removeprefix("attr:"), "attribute name")
        if not field.startswith("attr:"):
            raise ValueError(f"an index field is workflow or attr:<name>, not {field!r}")
    return f"{_index(tenant)}by:{field}:{hashlib.sha1(value.encode()).hexdigest()}"  # a name, not a seal


# A tenant's tasks in flight and its held creates (state/fair.py, D108), and of each workflow
# (D112): under the tenant's hash tag, so one function call counts and admits on a Redis Cluster
# too. A workflow is named by a digest of app and workflow, so no outside text is part of a key
# name. The set of tenants with a queue is one key the timer looks at.
PATTERN_FAIR_FLIGHT = f"{PREFIX}:fair:{{*}}:flight"
PATTERN_FAIR_QUEUE = f"{PREFIX}:fair:{{*}}:queue"
PATTERN_FAIR_WFLIGHT = f"{PREFIX}:fair:{{*}}:wflight:*"
PATTERN_FAIR_WQUEUE = f"{PREFIX}:fair:{{*}}:wqueue:*"
PATTERN_FAIR_QUEUES = f"{PREFIX}:fair:{{*}}:queues"
FAIR_QUEUED = f"{PREFIX}:fair:queued"


def fair_wflight(tenant: str, app: str, workflow: str) -> str:
    return f"{fair_flight(tenant).removesuffix(':flight')}:wflight:{_pair_digest(app, workflow)}"


def fair_wqueue(tenant: str, app: str, workflow: str) -> str:
    return f"{fair_flight(tenant).removesuffix(':flight')}:wqueue:{_pair_digest(app, workflow)}"


def fair_queues(tenant: str) -> str:
    return f"{PREFIX}:fair:{{{checked(_TENANT, tenant, 'tenant')}}}:queues"


def fair_flight(tenant: str) -> str:
    return f"{PREFIX}:fair:{{{checked(_TENANT, tenant, 'tenant')}}}:flight"


def fair_queue(tenant: str) -> str:
    return f"{PREFIX}:fair:{{{checked(_TENANT, tenant, 'tenant')}}}:queue"


# A tool's calls-per-second limit (state/rates.py, D109): one key per app and tool, named by a
# digest of the pair, so no outside text is part of a key name.
PATTERN_TOOL_RATE = f"{PREFIX}:rate:{{*}}"


def tool_rate(app: str, tool: str) -> str:
    return f"{PREFIX}:rate:{{{_pair_digest(app, tool)}}}"


# A tool's calls in flight (state/rates.py, D111): one sorted set per app and tool, named as its rate.
PATTERN_TOOL_SLOTS = f"{PREFIX}:slots:{{*}}"


def tool_slots(app: str, tool: str) -> str:
    return f"{PREFIX}:slots:{{{_pair_digest(app, tool)}}}"


def _pair_digest(app: str, name: str) -> str:
    """A digest naming one of an app's tools or workflows."""
    pair = f"{len(app)}:{app}/{name}"  # the length first: no app and name make another pair's text
    return hashlib.sha256(pair.encode()).hexdigest()[:32]


# Memory (state/memory.py): one hash per tenant and subject, under its own hash tag, so that the
# write door's function reads and writes one subject's records at once on a Redis Cluster too. The
# subject is named by a digest, so no outside text is ever part of a key name.
PATTERN_MEMORY = f"{PREFIX}:mem:{{*}}:records"
PATTERN_MEMORY_REFUSED = f"{PREFIX}:mem:{{*}}:refused"
PATTERN_MEMORY_GONE = f"{PREFIX}:mem:{{*}}:gone"
MEMORY_PER_SUBJECT = 64  # records one subject may hold; the write door refuses past it
# One record's JSON, the door refuses past it: 8 KiB of its own, and room for the verifier event a
# high-impact record carries (any the door accepts, 64 KiB, each byte escaped at worst).
MEMORY_RECORD_BYTES = 8192 + 2 * 64 * 1024
MEMORY_REFUSED_KEPT = 10_000  # refusals kept per tenant, forgets kept (trimmed to about this)
MEMORY_FORGOTTEN = f"{PREFIX}:mem:forgotten"  # stream: each `memory forget`: source, by, at, what went


def memory(tenant: str, subject: str) -> str:
    return f"{_subject(tenant, subject)}:records"


def memory_gone(tenant: str, subject: str) -> str:
    return f"{_subject(tenant, subject)}:gone"


def _subject(tenant: str, subject: str) -> str:
    digest = hashlib.sha256(subject.encode()).hexdigest()[:32]
    return f"{PREFIX}:mem:{{{checked(_TENANT, tenant, 'tenant')}.{digest}}}"


def memory_refused(tenant: str) -> str:
    return f"{PREFIX}:mem:{{{checked(_TENANT, tenant, 'tenant')}}}:refused"


# Evidence documents (state/evidence.py): each stored once per tenant by its content digest, under a
# hash tag of its own, with the tasks that hold an excerpt of it; a task keeps the reference and
# the excerpt (wk:{T}:evidence). The document expires; the excerpt lives as long as its task.
PATTERN_EVIDENCE_DOC = f"{PREFIX}:ev:{{*}}:doc"
PATTERN_EVIDENCE_TASKS = f"{PREFIX}:ev:{{*}}:tasks"
EVIDENCE_TTL_S = 90 * 24 * 3600  # a document is kept this long after the last task that cited it
_DIGEST = re.compile(r"[0-9a-f]{64}")


def evidence_doc(tenant: str, digest: str) -> str:
    return f"{_evidence(tenant, digest)}:doc"


def evidence_tasks(tenant: str, digest: str) -> str:
    return f"{_evidence(tenant, digest)}:tasks"


def _evidence(tenant: str, digest: str) -> str:
    return f"{PREFIX}:ev:{{{checked(_TENANT, tenant, 'tenant')}.{checked(_DIGEST, digest, 'digest')}}}"


# Replays of dead letters (state/replays.py, docs/decisions.md D71): the admin's record of each, read
# back by `wakeful dlq list` and `show`. It starts no `wk:{` and no pattern of a role's reaches it.
DLQ_REPLAYS = f"{PREFIX}:dlq:replays"
DLQ_REPLAYS_KEPT = (
    100_000  # replays kept (trimmed to about this): a letter replayed long ago may be replayed again
)


# The ops page's sessions (operate/ops/sessions.py): one key each, named by the SHA-256 of the
# session's nonce (so the key names no cookie), living as long as its idle limit and renewed by each
# page, never past the session's absolute end; logout deletes it. Admin only: no pattern of a role's
# reaches it. The limits are `wakeful ops --session-idle/--session-max`; these are their defaults.
OPS_SESSION_IDLE_S = 30 * 60
OPS_SESSION_MAX_S = 8 * 3600
_OPS_SESSION_DIGEST = re.compile(r"[0-9a-f]{64}")


def ops_session(digest: str) -> str:
    return f"{PREFIX}:ops:session:{checked(_OPS_SESSION_DIGEST, digest, 'session digest')}"
