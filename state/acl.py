"""Least privilege in Redis: one ACL user per role, limited to the keys and commands it needs.

Rules use Redis 7 selectors, `(~pattern +command ...)`: a command is allowed only if one selector
grants both the command and every key it names. So the gate may XADD to a counter stream but not
SET, DEL, XTRIM or XSETID it: its counter can only move forward. The proposer reaches its token
counters (XINFO STREAM, XADD), reads the freezes, marks a frozen task held: nothing of Progress.

No role may run Lua of its own: EVAL, EVAL_RO, SCRIPT and FUNCTION (LOAD, DELETE, FLUSH, RESTORE)
are in no role's rules. The executor, the relay (the task index, its outbox trim), the gate and
the timer (the in-flight limits) and a downstream's credential FCALL the functions the admin
loaded (state/library.py). Redis 7.0 cannot name a function in an ACL rule, so `+fcall` lets a
role call any loaded function; but FCALL's keys must fit the selector that grants it, and a
function runs with the caller's rights, so each selector with `+fcall` also grants exactly the
commands its functions run (docs/decisions.md D31).
Each role's password is in its own secrets folder (state/credentials.py).
"""

from __future__ import annotations

from typing import Any, cast

import redis
from redis.cluster import RedisCluster

from wakeful.core import secrets
from wakeful.core.errors import MissingCredential
from wakeful.core.settings import Settings
from wakeful.state import downstreams, keys
from wakeful.state.acl_lines import DEFAULT, DEFAULT_RULES, aclfile_lines, setuser_commands, user_name
from wakeful.state.downstreams import Downstream

__all__ = [  # the users' written forms (state/acl_lines.py) are part of this module's face
    "DEFAULT", "DEFAULT_RULES", "ROLES", "RULES", "CountingConnection", "aclfile_lines",
    "client", "connect", "downstream_rules", "downstreams_of", "is_cluster", "minted_only",
    "setuser_commands", "user_name", "users",
]  # fmt: skip

# The runtime's users. A downstream an app's tools call (state/downstreams.py: the example apps'
# bank and supplier register) is a user of its own beside these, which reaches its own keys only;
# no role but the executor is given its credential.
ROLES = ("inbound", "gate", "proposer", "executor", "timer", "relay", "ingress", "minter", "admin")

_FUNCTIONS = "+fcall"
_STATE = f"(~{keys.PATTERN_STATE} ~{keys.PATTERN_QUARANTINE} +get +set)"
_COUNTER = f"(~{keys.PATTERN_CTR} +xadd +xrevrange)"
# The fencing counter only grows: INCR at a grant is the one command that reaches it, so the
# executor's login cannot SET or DEL it back under a fence a downstream has already seen.
_LEASE = (
    f"(~{keys.PATTERN_LEASE} ~{keys.PATTERN_FENCE} {_FUNCTIONS}) "
    f"(~{keys.PATTERN_LEASE} +get +set +exists +pexpire +del) (~{keys.PATTERN_FENCE} +incr)"
)
# A change's first step (state/first_step.py) WATCHes the task's four keys in one command and reads three
# of them in one MGET: rights that only read what the selectors above may read already.
_TASK_READ = (
    f"(~{keys.PATTERN_STATE} ~{keys.PATTERN_CTR} ~{keys.PATTERN_LEASE} ~{keys.PATTERN_QUARANTINE} +watch) "
    f"(~{keys.PATTERN_STATE} ~{keys.PATTERN_LEASE} ~{keys.PATTERN_QUARANTINE} +mget)"
)
_INBOX = f"(~{keys.PATTERN_INBOX} +sadd +sismember)"
_OUTBOX_WRITE = f"(~{keys.PATTERN_OUTBOX} ~{keys.OUTBOX_DIRTY} +xadd +sadd)"
_OPS_READ = f"(~{keys.PATTERN_OPS} +hget +hgetall)"
# The begin function reads the task's lease beside its ops hash, and both action functions add their
# record to the task's outbox (D70): FCALL names all three, so they share one selector that may only
# call functions; each command inside is then checked on its own.
_OPS_WRITE = (
    f"(~{keys.PATTERN_OPS} ~{keys.PATTERN_LEASE} ~{keys.PATTERN_OUTBOX} {_FUNCTIONS}) "
    f"(~{keys.PATTERN_OPS} ~{keys.PATTERN_LEASE} +hget +hgetall +hsetnx +hset +get)"
)
# A Redis Cluster client learns which node serves which slot (CLUSTER SLOTS) and where each command
# names its keys (COMMAND): no data. A client of one Redis never sends either.
_TOPOLOGY = "+cluster|slots +command"
_KEYLESS = f"+ping +multi +exec +discard +unwatch {_TOPOLOGY}"
_AUTHORITY_READ = f"(%R~{keys.PATTERN_AUTHORITY} +get +mget +smembers +sismember +hget +hgetall +hmget)"
_RECEIPT_WRITE = f"(~{keys.PATTERN_RECEIPT} ~{keys.PATTERN_TASK_RECEIPT} +set +exists +get)"
_CORR_WRITE = f"(~{keys.PATTERN_CORR} +set +get)"
_DEADLINE_ADD = f"(~{keys.DEADLINES} +zadd)"
_PINS = f"(~{keys.PATTERN_HELD_FLOOR} +zadd +zrem +zrange)"
_EVIDENCE = (
    f"(~{keys.PATTERN_EVIDENCE} +hset +hgetall) "
    f"(~{keys.PATTERN_EVIDENCE_DOC} +set +expire) (~{keys.PATTERN_EVIDENCE_TASKS} +sadd +expire)"
)
# What a gate's change remembered, for the write door: only the gate adds to it, so only a
# decision the gate judged (on a signed event) can ask for an active record; what the executor's
# close remembers rides on its outbox record and is written quarantined (consumers/relay/memory_write.py).
_MEMORY_CANDIDATES = f"(~{keys.PATTERN_TASK_MEMORY} +xadd)"
# A freeze (authority/freezes.py): the gate keeps a frozen task's wakes in its held list, and the
# floor each pins (D115), and replays them once thawed; both Progress writers mark a task with held
# work, say which switches they have taken in, and publish the tool wording they deploy (D119).
_HELD = f"(~{keys.PATTERN_HELD} +rpush +lindex +lrem +llen) (~{keys.HELD_TASKS} +sadd +srem) {_PINS}"
_LIVE = f"+time (~{keys.HELD_TASKS} +sadd) (~{keys.LIVE} +hset) (~{keys.WORDINGS} +hsetnx +hset +hget)"
# A task a Progress writer could not open (a key its keyring lacks, D88) is marked, not retried;
# each of the two wakes the marked tasks when it starts (consumers/kafka/unreadable.py).
_UNREADABLE = f"(~{keys.UNREADABLE_TASKS} +sadd +smembers +srem) (~{keys.HELD_TASKS} +srem)"
# The proposer's budget, read before a model call and added to after (a plain pipeline: two slots):
# a stream's top id, XADD its one write, so it never moves back (D51). The freezes; a held mark (D117).
_TOKENS = f"(~{keys.PATTERN_TASK_SPENT} ~{keys.PATTERN_TENANT_SPENT} +xadd +xinfo|stream)"
_FROZEN = f"(%R~{keys.AUTH_FROZEN} +hgetall) (~{keys.HELD_TASKS} +sadd)"

# The task index (state/index.py): the relay keeps it, through its one function, which moves a task
# between a tenant's sets (all under the tenant's hash tag) and never back to an older version.
# Redis 7.0 checks a function's commands against its caller, so the login may send them by hand:
# what the read door serves is only a summary whose MAC (the relay's index key) verifies (D93).
_INDEX_WRITE = f"(~{keys.PATTERN_INDEX} {_FUNCTIONS} +hget +hset +zadd +zrem +zscore)"
# The task gauges the relay serves with its metrics (consumers/kafka/task_gauges.py): counts of the index's
# sets, the summaries of tasks that may be stuck, and how many deadlines fall due soon. Reads only.
# HGETALL: its one pass that signs the summaries of the release before (D93).
_INDEX_COUNT = (
    f"(%R~{keys.PATTERN_INDEX} +zcard +zrangebyscore +hmget +hgetall) (%R~{keys.DEADLINES} +zcount)"
)

# Memory (state/memory.py): the relay is its write door, through its one function, which adds a
# record to a subject's hash with HSETNX, never over one there (and drops expired or revoked ones
# to make room); the gate reads a subject's records for the window (the read door). Redis 7.0 checks
# every command a function runs against its caller, so the relay's login may send those commands
# itself: what makes a record shown is its writer's seal, which the relay cannot make (D93).
_MEMORY_WRITE = (
    f"(~{keys.PATTERN_MEMORY} ~{keys.PATTERN_MEMORY_GONE} {_FUNCTIONS} +hget +hlen +hgetall +hdel +hsetnx "
    f"+sismember +sadd) (~{keys.PATTERN_MEMORY_REFUSED} +xadd) (~{keys.PATTERN_TASK_MEMORY} +xrange +xdel)"
)
_MEMORY_READ = f"(%R~{keys.PATTERN_MEMORY} +hgetall)"

# A tenant's in-flight limit (state/fair.py, D108) and its workflows' (D112): the gate admits a
# create or queues it (fair_take) and marks the tenant; the timer lets queued creates in
# (fair_release), unmarks a tenant whose queues are empty, and mends leaked slots. The functions'
# keys share one selector that may only call functions. The gate and the executor give a slot back.
_FAIR_FLIGHTS = f"~{keys.PATTERN_FAIR_FLIGHT} ~{keys.PATTERN_FAIR_WFLIGHT}"
_FAIR_SETS = f"{_FAIR_FLIGHTS} ~{keys.PATTERN_FAIR_QUEUE} ~{keys.PATTERN_FAIR_WQUEUE}"
_FAIR_KEYS = f"{_FAIR_SETS} ~{keys.PATTERN_FAIR_QUEUES}"
_FAIR_TAKE = (
    f"({_FAIR_KEYS} {_FUNCTIONS}) ({_FAIR_SETS} +zscore +zcard +zrank +zrem +zadd) "
    f"(~{keys.PATTERN_FAIR_QUEUES} +scard +sadd) (~{keys.FAIR_QUEUED} +sadd)"
)
_FAIR_RELEASE = (
    f"({_FAIR_KEYS} {_FUNCTIONS}) ({_FAIR_SETS} +zcard +zrange +zrangebyscore +zrem +zadd) "
    f"(~{keys.PATTERN_FAIR_QUEUES} +smembers +scard +srem +sadd) (~{keys.FAIR_QUEUED} +smembers +srem +sadd) "
    f"(%R~{keys.PATTERN_STATE} %R~{keys.PATTERN_HELD} +exists) (%R~{keys.AUTH_LIMITS} +hgetall) "
    f"(~{keys.PATTERN_HELD_FLOOR} +zrangebyscore +zrem)"
)
_FAIR_GIVE_BACK = f"({_FAIR_FLIGHTS} +zrem)"

# A tool's calls per second (state/rates.py, D109): the executor counts a call through rate_take,
# on Redis's clock; its calls at once (D111) through slot_take, and the call's end gives its slot
# back (ZREM). Each key's selector may only call functions; the commands they run are granted apart.
_TOOL_RATE = f"+time (~{keys.PATTERN_TOOL_RATE} {_FUNCTIONS}) (~{keys.PATTERN_TOOL_RATE} +get +set)"
_TOOL_SLOTS = (
    f"(~{keys.PATTERN_TOOL_SLOTS} {_FUNCTIONS}) "
    f"(~{keys.PATTERN_TOOL_SLOTS} +zremrangebyscore +zscore +zcard +zadd +zrange +pexpireat +zrem)"
)

# The two roles that write Progress (through state.store). Only the executor holds task leases:
# the gate reads and WATCHes the lease (_TASK_READ) and needs it free (docs/decisions.md D49).
_PROGRESS_WRITER = (
    f"resetkeys -@all {_KEYLESS} {_STATE} {_COUNTER} {_TASK_READ} {_INBOX} {_OUTBOX_WRITE} "
    f"{_AUTHORITY_READ} {_RECEIPT_WRITE}"
)

RULES: dict[str, str] = {
    "inbound": (
        f"resetkeys -@all {_KEYLESS} {_AUTHORITY_READ} {_RECEIPT_WRITE} "
        f"(%R~{keys.PATTERN_CORR} +get) (~{keys.PATTERN_SEEN} +set +get +exists +mget) "
        # Whether a task exists, not what it holds: a task made before the namespaces (D52).
        f"(%R~{keys.PATTERN_STATE} +exists)"
    ),
    "gate": (
        f"{_PROGRESS_WRITER} {_OPS_READ} {_CORR_WRITE} {_DEADLINE_ADD} {_EVIDENCE} {_HELD} {_LIVE} "
        f"{_MEMORY_READ} {_MEMORY_CANDIDATES} {_UNREADABLE} {_FAIR_TAKE}"
    ),
    "proposer": f"resetkeys -@all +ping {_TOPOLOGY} {_TOKENS} {_FROZEN}",
    # The executor wakes a task whose next stage offers a tool (a deadline due now, through the timer),
    # and indexes a wait its close made (a workflow's `done` returned one, or a tool's call is pending).
    "executor": (
        f"{_PROGRESS_WRITER} {_LEASE} {_OPS_WRITE} {_DEADLINE_ADD} {_CORR_WRITE} {_LIVE} {_UNREADABLE} "
        f"{_FAIR_GIVE_BACK} {_TOOL_RATE} {_TOOL_SLOTS}"
    ),
    # Its sweep (consumers/timer/sweep.py) reads the task index, and whether a task is frozen,
    # quarantined or leased, for the tasks nothing will wake (D85).
    # Its schedules (consumers/timer/schedules.py) read the schedules, claim a tick before it is
    # published, and move each schedule's newest published tick forward, never back (ZADD GT).
    # Its look at the held creates (consumers/timer/fair.py) reads the limits, lets them in, and
    # gives back slots whose tasks are not stored (EXISTS).
    "timer": (
        f"resetkeys -@all {_KEYLESS} +scan (~{keys.DEADLINES} +zrangebyscore +zrem +zadd +zcard) "
        f"(%R~{keys.AUTH_SCHEDULES} +hgetall) (~{keys.SCHEDULE_FIRED} +zadd +zrange) "
        f"(~{keys.PATTERN_SCHEDULE_CLAIM} +set) "
        f"(%R~{keys.PATTERN_INDEX} +zrangebyscore +hmget) (%R~{keys.HELD_TASKS} +sismember) "
        f"(%R~{keys.PATTERN_QUARANTINE} %R~{keys.PATTERN_LEASE} +exists) {_FAIR_RELEASE}"
    ),
    "relay": (
        # +time: the clock its outbox entries are stamped with, for its watermark on the log (D87).
        f"resetkeys -@all {_KEYLESS} +scan +time "
        f"(~{keys.PATTERN_OUTBOX} {_FUNCTIONS} +xrange +xdel +xlen +del) "
        f"(~{keys.OUTBOX_DIRTY} +spop +sadd +srem +scard) {_INDEX_WRITE} {_INDEX_COUNT} {_MEMORY_WRITE} "
        # the mark that it signed the summaries of the release before: set once, never unset (D93)
        f"(~{keys.INDEX_SIGNED} +setnx +exists)"
    ),
    # The read door (consumers/ingress/main.py): a signer's key, its own receipts, its tenant's index.
    "ingress": (
        f"resetkeys -@all {_KEYLESS} (%R~{keys.AUTH_SIGNERS} +hget) "
        f"(%R~{keys.PATTERN_TASK_RECEIPT} %R~{keys.PATTERN_RECEIPT} +get) "
        f"(%R~{keys.PATTERN_INDEX} +hget +hmget +zrange +zrevrange)"
    ),
    # The minter (consumers/minter, D120) makes and removes per-step users; reads a step's lease and intent;
    # HMGET: which of its Kafka tokens were revoked (D123).
    "minter": (
        f"resetkeys -@all {_KEYLESS} +acl|setuser +acl|deluser +acl|users (%R~{keys.PATTERN_LEASE} +get) "
        f"(%R~{keys.PATTERN_OPS} +hget) (~{keys.MINTED} ~{keys.MINTED_DUE} +hset +hdel +hkeys +hgetall "
        "+hmget +zadd +zrem +zrange +zrangebyscore)"
    ),
    # The admin alone reaches the record of dead-letter replays (keys.DLQ_REPLAYS): no role's pattern does.
    "admin": "resetkeys ~* resetchannels &* +@all",
}


def downstreams_of(settings: Settings) -> tuple[Downstream, ...]:
    """The downstreams the settings name (WAKEFUL_DOWNSTREAMS), checked, none taking a role's name."""
    return downstreams.load(settings.downstreams, frozenset(ROLES))


def downstream_rules(downstream: Downstream) -> str:
    """A downstream's user reaches its own keys with its own commands; FCALL only if it books in Lua."""
    fcall = f" {_FUNCTIONS}" if downstream.functions else ""
    return f"resetkeys -@all {_KEYLESS} +time (~{downstream.pattern} {' '.join(downstream.commands)}{fcall})"


def users(settings: Settings) -> dict[str, str]:
    """Every Redis user wakeful makes, user -> rules: the runtime's roles, then the downstreams'
    static users (a downstream with `static_login=False` has none: its users are minted per step)."""
    return RULES | {d.user: downstream_rules(d) for d in downstreams_of(settings) if d.static_login}


def minted_only(settings: Settings) -> list[str]:
    """The downstreams with no static user: an old one found is removed (D125)."""
    return [d.user for d in downstreams_of(settings) if not d.static_login]


class CountingConnection(redis.Connection):
    """Counts round trips: every packed send (a command, a pipeline, a pinned batch) is one."""

    round_trips = 0  # per process; read by `wakeful bench` from each role's stop log

    def send_packed_command(self, command: object, check_health: bool = True) -> None:
        CountingConnection.round_trips += 1
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


def connect(settings: Settings, role: str, timeout: float | None = None) -> redis.Redis:
    """A client that authenticates as the role's ACL user, with the password from the role's own
    secrets folder; no other role's file is opened. `timeout`: seconds a connect or a reply may
    take before redis.TimeoutError (None: wait as long as the socket does).

    Without a credential for the role this refuses, unless WAKEFUL_ALLOW_DEFAULT_USER is set (local
    experiments only): the default user can do whatever the operator left it able to do.
    """
    if role in minted_only(settings):
        raise MissingCredential(
            role,
            f"downstream {role!r} has no static login: a tool that calls it declares credential = {role!r} "
            "and is minted a user for each step (sdk credential(); state/stepped.as_minted)",
        )
    if role not in users(settings):
        known = ", ".join(users(settings))
        raise MissingCredential(role, f"unknown Redis role {role!r}; roles are {known}")
    if secrets.exists(settings, role, "redis"):
        doc = secrets.load(settings, role, "redis")
        if not {"user", "password"} <= doc.keys():
            where = secrets.path(settings, role, "redis")
            raise MissingCredential(role, f"{where} names no user and password: restore it or rotate it")
        return client(
            settings,
            username=doc["user"],
            password=doc["password"],
            connection_class=CountingConnection,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )
    if settings.allow_default_user or (role == "admin" and not settings.runs_local_redis):
        # An operator's own Redis: admin is whoever WAKEFUL_REDIS_URL authenticates as.
        return client(settings, socket_timeout=timeout, socket_connect_timeout=timeout)
    raise MissingCredential(
        role,
        f"no Redis credential for role {role!r} at {secrets.path(settings, role, 'redis')}: `wakeful dev up` "
        "creates it for the local stack (compose: the init service); for your own Redis run "
        "`wakeful admin acl --apply`, or set WAKEFUL_ALLOW_DEFAULT_USER=1 for a local experiment",
    )


def client(settings: Settings, **options: Any) -> redis.Redis:
    """The one place a Redis client is built: a cluster client when WAKEFUL_REDIS_CLUSTER is set
    (it learns every node from the one the URL names, and sends each command to its slot's node).

    It is typed as redis.Redis: it answers every command wakeful sends, in the same shapes, and
    the one place that talks to a connection directly (state/pinned.py) tells the two apart."""
    if settings.redis_cluster:
        return cast(redis.Redis, RedisCluster.from_url(settings.redis_url, **options))
    return redis.Redis.from_url(settings.redis_url, **options)


def is_cluster(client: redis.Redis) -> bool:
    return isinstance(client, RedisCluster)
