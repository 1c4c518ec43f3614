"""Every ACL key pattern reaches the keys of its own kind and no other, whatever names outsiders
choose for the parts they control: a tenant called "receipt", a correlation id called "state", an
event id called "quarantine". Redis globs and fnmatchcase agree on every character the key
alphabets allow (`*` crosses `:`, braces are literal, no key holds `[`, `?` or `\\`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from fnmatch import fnmatchcase

import pytest

from wakeful.core import ids
from wakeful.examples import bank, suppliers_keys
from wakeful.state import acl, keys

# The names of every kind of key, and the pattern that grants it (None: granted by exact name).
KINDS: dict[str, str | None] = {
    "state": keys.PATTERN_STATE,
    "ctr": keys.PATTERN_CTR,
    "lease": keys.PATTERN_LEASE,
    "fence": keys.PATTERN_FENCE,
    "inbox": keys.PATTERN_INBOX,
    "outbox": keys.PATTERN_OUTBOX,
    "ops": keys.PATTERN_OPS,
    "quarantine": keys.PATTERN_QUARANTINE,
    "evidence": keys.PATTERN_EVIDENCE,
    "held": keys.PATTERN_HELD,
    "task receipt": keys.PATTERN_TASK_RECEIPT,
    "task spent": keys.PATTERN_TASK_SPENT,
    "task tokens": keys.PATTERN_TASK_TOKENS,
    "tenant spent": keys.PATTERN_TENANT_SPENT,
    "tenant tokens": keys.PATTERN_TENANT_TOKENS,
    "receipt": keys.PATTERN_RECEIPT,
    "seen": keys.PATTERN_SEEN,
    "corr": keys.PATTERN_CORR,
    "authority": keys.PATTERN_AUTHORITY,
    "task index": keys.PATTERN_INDEX,
    "memory": keys.PATTERN_MEMORY,
    "memory gone": keys.PATTERN_MEMORY_GONE,
    "task memory": keys.PATTERN_TASK_MEMORY,
    "evidence doc": keys.PATTERN_EVIDENCE_DOC,
    "evidence tasks": keys.PATTERN_EVIDENCE_TASKS,
    "memory refused": keys.PATTERN_MEMORY_REFUSED,
    "bank": bank.PATTERN,
    "suppliers": suppliers_keys.PATTERN,
    "schedule claim": keys.PATTERN_SCHEDULE_CLAIM,
    "fair flight": keys.PATTERN_FAIR_FLIGHT,
    "fair queue": keys.PATTERN_FAIR_QUEUE,
    "fair workflow flight": keys.PATTERN_FAIR_WFLIGHT,
    "fair workflow queue": keys.PATTERN_FAIR_WQUEUE,
    "fair queues": keys.PATTERN_FAIR_QUEUES,
    "held floor": keys.PATTERN_HELD_FLOOR,
    "fair queued": None,
    "tool rate": keys.PATTERN_TOOL_RATE,
    "tool slots": keys.PATTERN_TOOL_SLOTS,
    "schedule fired": None,
    "outbox index": None,
    "deadlines": None,
    "held tasks": None,
    "unreadable tasks": None,
    "live": None,
    "wordings": None,
    "minted": None,
    "dlq replays": None,  # the admin's alone: no role's pattern may reach it
}
TASK_KEYS: dict[str, Callable[[str], str]] = {
    "state": keys.state,
    "ctr": keys.ctr,
    "lease": keys.lease,
    "fence": keys.fence,
    "inbox": keys.inbox,
    "outbox": keys.outbox,
    "ops": keys.ops,
    "quarantine": keys.quarantine,
    "evidence": keys.evidence,
    "task memory": keys.task_memory,
    "held": keys.held,
    "task spent": keys.spent,
    "task tokens": keys.tokens,
}
# Names an outsider may choose that spell another kind of key, or a piece of one.
WORDS = (*(name.split()[-1] for name in KINDS), "receipt", "tenant", "seen", "corr", "x", "ledger")
EVENT_WORDS = (*(w for w in WORDS if re.fullmatch(ids.EVENT_ID, w)), "evt-00000001")


def every_key() -> list[tuple[str, str]]:
    """(kind, key) for every key builder, fed the parts above."""
    built: list[tuple[str, str]] = [
        ("outbox index", keys.OUTBOX_DIRTY),
        ("deadlines", keys.DEADLINES),
        ("held tasks", keys.HELD_TASKS),
        ("unreadable tasks", keys.UNREADABLE_TASKS),
        ("live", keys.LIVE),
        ("wordings", keys.WORDINGS),
        ("minted", keys.MINTED),
        ("minted", keys.MINTED_DUE),
        ("schedule fired", keys.SCHEDULE_FIRED),
        ("authority", keys.AUTH_SCHEDULES),
        ("authority", keys.AUTH_LIMITS),
        ("authority", keys.AUTH_LIMIT_HISTORY),
        ("fair queued", keys.FAIR_QUEUED),
        ("index signed", keys.INDEX_SIGNED),
        ("dlq replays", keys.DLQ_REPLAYS),
        ("ops session", keys.ops_session("ab" * 32)),  # admin only: no role's pattern may reach it
        *(("authority", k) for k in (keys.AUTH_APPROVERS, keys.AUTH_LIMIT, keys.AUTH_SIGNERS)),
        *(("authority", k) for k in (keys.AUTH_FROZEN, keys.AUTH_SWITCHED, keys.AUTH_SWITCH_LOG)),
        ("authority", keys.AUTH_POLICY),
        ("authority", keys.AUTH_RELEASES),
        ("bank", bank.LEDGER),
        *(("held floor", keys.held_floor(p)) for p in (0, 7, 999_999)),
        ("suppliers", suppliers_keys.LOG),
    ]
    for word in WORDS:
        built += [(kind, make(word)) for kind, make in TASK_KEYS.items()]
        built += [
            ("tenant spent", keys.tenant_spent(word)),
            ("tenant tokens", keys.tenant_tokens(word, "20261201")),
            ("corr", keys.corr(word)),
            *(("task index", k) for k in (keys.index_tasks(word), keys.index_stage(word, "closed"))),
            ("task index", keys.index_wait(word, word)),
            ("memory", keys.memory(word, f"supplier:{word}")),
            ("memory refused", keys.memory_refused(word)),
            ("fair flight", keys.fair_flight(word)),
            ("fair queue", keys.fair_queue(word)),
            ("fair workflow flight", keys.fair_wflight(word, word, word)),
            ("fair workflow queue", keys.fair_wqueue(word, word, word)),
            ("fair queues", keys.fair_queues(word)),
            ("tool rate", keys.tool_rate(word, word)),
            ("tool slots", keys.tool_slots(word, word)),
            ("memory gone", keys.memory_gone(word, f"supplier:{word}")),
            ("evidence doc", keys.evidence_doc(word, "ab" * 32)),
            ("evidence tasks", keys.evidence_tasks(word, "ab" * 32)),
            ("bank", bank.fence_key(word)),
            ("suppliers", suppliers_keys.fence_key(word)),
        ]
        if keys.SCHEDULE_NAME.fullmatch(word):
            built.append(("schedule claim", keys.schedule_claim(word, 1_796_000_000_000)))
        for event_id in EVENT_WORDS:
            built += [
                ("task receipt", keys.receipt(event_id, word, key_id=word)),
                ("receipt", keys.receipt(event_id, key_id=word)),
                ("seen", keys.seen(word, event_id)),
            ]
    return built


@pytest.mark.parametrize(("kind", "pattern"), [(k, p) for k, p in KINDS.items() if p is not None])
def test_an_acl_pattern_reaches_only_keys_of_its_own_kind(kind: str, pattern: str) -> None:
    strays = [(other, key) for other, key in every_key() if fnmatchcase(key, pattern) and other != kind]
    assert strays == [], f"{pattern} ({kind}) also reaches {strays[:5]}"
    assert any(fnmatchcase(key, pattern) for other, key in every_key() if other == kind)


def test_every_pattern_the_acl_grants_is_one_of_the_key_tables_kinds() -> None:
    granted = {m for rules in acl.RULES.values() for m in re.findall(r"%?R?W?~([^ )]+)", rules)} - {"*"}
    known = {p for p in KINDS.values() if p is not None} | {
        keys.OUTBOX_DIRTY,
        keys.DEADLINES,
        keys.HELD_TASKS,
        keys.UNREADABLE_TASKS,
        keys.LIVE,
        keys.INDEX_SIGNED,  # the relay's mark that it signed the index of the release before (D93)
        keys.AUTH_SIGNERS,  # the read door reads this one authority key only
        keys.SCHEDULE_FIRED,  # each schedule's newest published tick: the timers' (D104)
        keys.AUTH_SCHEDULES,  # the timers read this one authority key only
        keys.AUTH_LIMITS,  # and this one: the tenants' in-flight limits (D108)
        keys.FAIR_QUEUED,  # the tenants with held creates (D108)
        keys.AUTH_FROZEN,  # the proposer reads this one authority key only (D117)
        keys.WORDINGS,  # the deployed tool wordings, published by gates and executors (D119)
        keys.MINTED,  # the minter's record of the users it made, and when each is due (D120)
        keys.MINTED_DUE,
    }
    assert granted <= known, granted - known
