"""The supplier register's keys and Redis user (state/downstreams.py): what the runtime's stack gives
the register, apart from what the register does with them (examples/suppliers.py)."""

from __future__ import annotations

import re

from wakeful.core import ids
from wakeful.state.downstreams import Downstream

# The register's keyspace, its own and no role's, under one hash tag ({register}): a write names its
# log stream beside its records in one atomic step, in one slot of a Redis Cluster.
#   suppliers:{register}:op:K        string  JSON outcome of one call (registration or payment)
#   suppliers:{register}:undo:K      string  JSON outcome of undoing the registration made under K
#   suppliers:{register}:master:S    string  JSON supplier master record: name, verified account
#   suppliers:{register}:fence:T     string  highest fencing token seen for task T
#   suppliers:{register}:faults:T    hash    test hook: operation -> "refuse" or a count of failures
#   suppliers:{register}:log         stream  every record written, in order (field "r": JSON)
PATTERN = "suppliers:*"
TAG = "suppliers:{register}"
LOG = f"{TAG}:log"
SUPPLIER_ID = r"S-[0-9a-f]{16}"
CAS_RETRIES = 8  # concurrent writers in a row before a call is refused as unavailable
_SUPPLIER_ID = re.compile(SUPPLIER_ID)


def call_key(op_key: str) -> str:
    return f"{TAG}:op:{ids.checked(ids.OP_KEY_RE, op_key, 'op key')}"


def undo_key(op_key: str) -> str:
    return f"{TAG}:undo:{ids.checked(ids.OP_KEY_RE, op_key, 'op key')}"


def master_key(supplier_id: str) -> str:
    return f"{TAG}:master:{ids.checked(_SUPPLIER_ID, supplier_id, 'supplier id')}"


def fence_key(task_id: str) -> str:
    return f"{TAG}:fence:{ids.checked(ids.TASK_ID_RE, task_id, 'task id')}"


def faults_key(task_id: str) -> str:
    return f"{TAG}:faults:{ids.checked(ids.TASK_ID_RE, task_id, 'task id')}"


# Plain WATCH/MULTI transactions, no Lua: it calls no function.
DOWNSTREAM = Downstream(
    "suppliers", PATTERN, ("+get", "+set", "+exists", "+watch", "+hget", "+hincrby", "+xadd", "+xrange")
)
