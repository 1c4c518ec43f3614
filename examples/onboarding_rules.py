"""What the onboarding accepts from outside: each field checked strictly (no bool for an int, no
unbounded text, an IBAN-shaped account with a valid checksum). A bad field raises Invalid with a
short reason that quotes the input bounded; a decision wrapped in `refusing` returns it as Refuse."""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar

from wakeful.examples import suppliers_keys
from wakeful.examples.suppliers import ACCOUNT
from wakeful.schemas.base import cut
from wakeful.sdk import Refuse

__all__ = ["ACCOUNT"]
P = ParamSpec("P")
T = TypeVar("T")

# Printable, no control character, no space at either end.
NAME = r"^[^\x00-\x20\x7f](?:[^\x00-\x1f\x7f]{0,198}[^\x00-\x20\x7f])?$"
REF = r"^[A-Za-z0-9_.-]{1,64}$"
SUPPLIER = f"^{suppliers_keys.SUPPLIER_ID}$"
PAYMENT = r"^P-[0-9a-f]{16}$"
LABEL = r"[a-z0-9_.-]{1,64}"
MAX_AMOUNT = 10**15  # minor units; every sum stays exact in 64 bits
MAX_DOCUMENTS = 8
MAX_TEXT = 16_000  # characters per document
MAX_WAIT = timedelta(days=60)
_TEXT_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class Invalid(ValueError):
    """A field from outside that the onboarding does not accept; the message says why."""


def refusing(decide: Callable[P, T]) -> Callable[P, T | Refuse]:
    """`decide`, answering Refuse(reason) where a field it reads is Invalid."""

    @functools.wraps(decide)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> T | Refuse:
        try:
            return decide(*args, **kwargs)
        except Invalid as exc:
            return Refuse(str(exc))

    return wrapped


def shown(raw: Any) -> str:
    if isinstance(raw, int) and not isinstance(raw, bool) and raw.bit_length() > 64:
        return f"an integer of {raw.bit_length()} bits"  # its digits may be too many to print
    return cut(repr(raw), 40)


def pattern(raw: Any, field: str, regex: str, what: str) -> str:
    if isinstance(raw, str) and len(raw) <= 200 and re.fullmatch(regex, raw):
        return raw
    raise Invalid(f"{field} must be {what}, got {shown(raw)}")


def name(raw: Any, field: str) -> str:
    return pattern(raw, field, NAME, "1 to 200 printable characters, no space at either end")


def amount(raw: Any) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool) and 0 < raw <= MAX_AMOUNT:
        return raw
    raise Invalid(f"amount must be a whole number from 1 to {MAX_AMOUNT}, got {shown(raw)}")


def text(raw: Any, field: str) -> str:
    if isinstance(raw, str) and 0 < len(raw) <= MAX_TEXT and not _TEXT_CONTROL.search(raw):
        return raw
    raise Invalid(f"{field} must be text of 1 to {MAX_TEXT} characters without control characters")


def documents(raw: Any) -> dict[str, str]:
    """Label -> text: what the supplier sent, kept as untrusted evidence."""
    if not isinstance(raw, Mapping) or len(raw) > MAX_DOCUMENTS:
        raise Invalid(f"documents must map at most {MAX_DOCUMENTS} labels to texts, got {shown(raw)}")
    out: dict[str, str] = {}
    for label, body in raw.items():
        if not isinstance(label, str) or not re.fullmatch(LABEL, label):
            raise Invalid(f"a document label must match {LABEL}, got {shown(label)}")
        out[label] = text(body, f"document {label}")
    return out


def iban(raw: Any) -> str:
    """`raw` if it is an IBAN in its compact upper-case form with a valid ISO 7064 checksum."""
    if not isinstance(raw, str) or not re.fullmatch(ACCOUNT, raw):
        raise Invalid(f"account must be an IBAN, compact and upper-case, got {shown(raw)}")
    # Check digits run 02..98: 00, 01 and 99 would pass MOD 97 as 97, 98 and 02 do.
    if checksum(raw) != 1 or not 2 <= int(raw[2:4]) <= 98:
        raise Invalid(f"account {raw} fails the IBAN checksum")
    return raw


def checksum(account: str) -> int:
    """ISO 7064 MOD 97-10 over the rearranged IBAN (letters as 10..35): 1 for a valid one."""
    moved = account[4:] + account[:4]
    return int("".join(str(int(ch, 36)) for ch in moved)) % 97


def window(raw: Any, default: timedelta) -> timedelta:
    """A wait in seconds from outside, clamped to MAX_WAIT before it becomes a timedelta."""
    if raw is None:
        return default
    if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0:
        return timedelta(seconds=min(raw, int(MAX_WAIT.total_seconds())))
    raise Invalid(f"a wait must be a whole number of seconds above 0, got {shown(raw)}")


_ACCOUNT_IN_TEXT = re.compile(r"\b[A-Z]{2}[0-9]{2}[A-Z0-9]{8,30}\b")


def accounts_named(text: str) -> list[str]:
    """The valid IBANs a document names (compact, upper-case), each once, in order: what a document
    may ask the supplier to be paid to. Data, never an instruction."""
    found: list[str] = []
    for raw in _ACCOUNT_IN_TEXT.findall(text):
        try:
            account = iban(raw)
        except Invalid:
            continue
        if account not in found:
            found.append(account)
    return found


def subject(legal_name: str) -> str:
    """The memory subject of a supplier: `supplier:<slug of its legal name>` (a digest where the
    name has no latin letters or digits), the same for every task that onboards it."""
    slug = re.sub(r"[^a-z0-9]+", "-", legal_name.casefold()).strip("-")[:64]
    return f"supplier:{slug or hashlib.sha256(legal_name.encode()).hexdigest()[:32]}"
