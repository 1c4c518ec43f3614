"""The supplier register's keys and Redis user (state/downstreams.py): what the runtime's stack gives
the register, apart from what the register does with them (examples/suppliers.py)."""

from __future__ import annotations

import re

from wakeful.core import ids
from wakeful.state.downstreams import Downstream, op_record, task_record

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
_SUPPLIER_ID = re.compile(SUPPLIER_ID)


def call_key(op_key: str) -> str:
    return op_record(TAG, "op", op_key)


def undo_key(op_key: str) -> str:
    return op_record(TAG, "undo", op_key)


def master_key(supplier_id: str) -> str:
    return f"{TAG}:master:{ids.checked(_SUPPLIER_ID, supplier_id, 'supplier id')}"


def fence_key(task_id: str) -> str:
    return task_record(TAG, "fence", task_id)


def faults_key(task_id: str) -> str:
    return task_record(TAG, "faults", task_id)


# Plain WATCH/MULTI transactions, no Lua: it calls no function. Its tools are minted a user per
# step (D120): it has no static login (D125).
DOWNSTREAM = Downstream(
    "suppliers",
    PATTERN,
    ("+get", "+set", "+exists", "+watch", "+hget", "+hincrby", "+xadd", "+xrange"),
    static_login=False,
)
