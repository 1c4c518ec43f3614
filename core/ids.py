"""The id alphabets: what may name a task, an event, a signer, a tenant or an operation.

Ids arrive from outside (signed events) and end up in Redis key names, so the wire models
(schemas/events.py) and every key builder (state/keys.py, which also tabulates where each is named)
check them against these patterns: no brace, colon, `|`, whitespace or control character, and a
bounded length. Pure: it names no key and loads no client.
"""

from __future__ import annotations

import re

OUTSIDE_TASK_ID = r"[A-Za-z0-9_-]{1,64}"  # what a signed event calls a task, in its tenant's namespace
TENANT = r"[A-Za-z0-9_.-]{1,64}"  # a signer's tenant (authority checks it at registration)
TASK_ID = rf"(?:{TENANT}\.)?{OUTSIDE_TASK_ID}"  # the runtime's: task_in()
EVENT_ID = r"[A-Za-z0-9_.-]{8,128}"
CORRELATION_ID = r"[A-Za-z0-9_.-]{1,128}"
KEY_ID = r"[A-Za-z0-9_.@-]{1,128}"
OP_KEY = r"[A-Za-z0-9_.:-]{1,200}"
DAY = r"[0-9]{8}"
NAME = r"[a-z][a-z0-9_]{0,39}"  # a stage, a view, a search attribute (D107)
OUTSIDE_TASK_ID_RE = re.compile(OUTSIDE_TASK_ID)
TASK_ID_RE = re.compile(TASK_ID)
EVENT_ID_RE = re.compile(EVENT_ID)
CORRELATION_ID_RE = re.compile(CORRELATION_ID)
KEY_ID_RE = re.compile(KEY_ID)
OP_KEY_RE = re.compile(OP_KEY)
TENANT_RE = re.compile(TENANT)
DAY_RE = re.compile(DAY)
NAME_RE = re.compile(NAME)


# The tenant of a signer registered without one, whose tasks keep the ids their events give them
# (producers/signing.py uses the same).
DEFAULT_TENANT = "default"


def task_in(tenant: str, task_id: str) -> str:
    """The runtime's id of the task that a signer of `tenant` calls `task_id`: each tenant names its
    tasks in a namespace of its own, so one tenant's create can neither find nor claim another's
    task, whatever id it picks. Never change: it names stored tasks."""
    checked(OUTSIDE_TASK_ID_RE, task_id, "task id")
    return task_id if tenant == DEFAULT_TENANT else f"{checked(TENANT_RE, tenant, 'tenant')}.{task_id}"


def named_by(tenant: str, task_id: str) -> str:
    """What a signer of `tenant` calls the task whose runtime id is `task_id` (the reverse of task_in)."""
    prefix = f"{tenant}."
    return task_id[len(prefix) :] if tenant != DEFAULT_TENANT and task_id.startswith(prefix) else task_id


def checked(pattern: re.Pattern[str], part: str, what: str) -> str:
    """`part` if the whole of it matches `pattern`; ValueError naming the rule otherwise."""
    if not pattern.fullmatch(part):
        shown = repr(part[:40]) + (f"... ({len(part)} characters)" if len(part) > 40 else "")
        raise ValueError(f"{what} {shown} cannot name a Redis key: it must match {pattern.pattern}")
    return part
