"""A downstream a tool reaches by producing to Kafka (D123): declared beside the Redis downstreams
(WAKEFUL_DOWNSTREAMS, state/downstreams.py), reached with a delegation token minted per step
(producers/kafka_tokens.py). Its owner principal holds WRITE on its topics and nothing else, and has
no password: only tokens log in as it."""

from __future__ import annotations

import re
from dataclasses import dataclass

OWNER_PREFIX = "wakeful-dt-"  # the owner principals' names: `User:wakeful-dt-<downstream>`
NAME = re.compile(r"[a-z][a-z0-9-]{0,30}")
TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def owner_of(downstream: str) -> str:
    """The principal name a downstream's tokens are owned by (and whose ACLs they carry)."""
    return f"{OWNER_PREFIX}{downstream}"


@dataclass(frozen=True)
class KafkaDownstream:
    """A downstream a tool reaches by producing to Kafka: its name (a tool's `credential` and
    `egress` name it), and the topics its tokens may write. Declared beside the Redis downstreams
    (WAKEFUL_DOWNSTREAMS); its owner principal, `User:wakeful-dt-<name>`, holds WRITE on `writes`
    and nothing else, and has no password: only tokens log in as it."""

    name: str
    writes: tuple[str, ...]

    @property
    def owner(self) -> str:
        return owner_of(self.name)

    def problems(self, taken: frozenset[str]) -> list[str]:
        found = []
        if not NAME.fullmatch(self.name) or self.name in taken:
            found.append(
                f"kafka downstream {self.name!r}: lowercase letters, digits and '-', and a name of its own"
            )
        bad = [t for t in self.writes if not TOPIC.fullmatch(t) or t.startswith("wakeful.")]
        if bad or not self.writes:
            found.append(
                f"{self.name}: writes {bad or '()'} must be one or more topics outside wakeful's `wakeful.`"
            )
        return found
