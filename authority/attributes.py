"""Which attributes a policy text can read, found in its syntax tree (Cedar's JSON form).

A decision's cost grows with what it is given: Cedar parses every attribute of the task entity and
of the context on each request, read or not (about 5 µs each). A policy can only see an attribute
through `e.name` or `e has name`; so an attribute whose name no policy in the text writes after a
`.` or a `has` cannot change a decision, and is left out of the request (authority/policy.py).

Two uses see a whole record and keep everything: the `context` variable used other than as the
left side of `.`/`has` (a policy comparing the whole record), and a text Cedar's JSON form does not
describe (an unknown node): then every attribute is sent, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_ACCESS = frozenset({".", "has"})


@dataclass(frozen=True)
class Reads:
    """The attribute names a text reads; `everything` where it may read any of them."""

    names: frozenset[str]
    everything: bool = False

    def keeps(self, name: str) -> bool:
        return self.everything or name in self.names


EVERYTHING = Reads(frozenset(), everything=True)


def reads(doc: dict[str, Any]) -> Reads:
    """What the policies and templates of Cedar's JSON policy set `doc` read."""
    names: set[str] = set()
    policies = [*doc.get("staticPolicies", {}).values(), *doc.get("templates", {}).values()]
    try:
        whole = any(_walk(cond.get("body"), names) for p in policies for cond in p.get("conditions", []))
    except _Unknown:
        return EVERYTHING
    return EVERYTHING if whole else Reads(frozenset(names))


class _Unknown(Exception):
    """A node this reader does not know: it cannot say what the text reads."""


def _walk(node: Any, names: set[str]) -> bool:
    """Collect into `names` every attribute `node` reads; True where it uses `context` whole."""
    if isinstance(node, list):
        return any([_walk(item, names) for item in node])
    if not isinstance(node, dict):
        raise _Unknown(node)
    if len(node) != 1:
        raise _Unknown(node)
    ((op, arg),) = node.items()
    if op == "Var":
        return bool(arg == "context")
    if op in ("Value", "Slot", "Unknown"):
        return False
    if op in _ACCESS:
        names.add(str(arg["attr"]))
        left = arg["left"]
        if isinstance(left, dict) and left.get("Var") == "context":
            return False
        return _walk(left, names)
    if op == "Record":
        return any([_walk(v, names) for v in arg.values()])
    if isinstance(arg, dict):  # an operator: its operands are the dict's values (left, right, arg, ...)
        return any([_walk(v, names) for k, v in arg.items() if k not in ("pattern", "entity_type")])
    if isinstance(arg, list):  # an extension call: {"decimal": [args]}
        return _walk(arg, names)
    raise _Unknown(node)
