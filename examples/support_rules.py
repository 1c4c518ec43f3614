"""The support agent's business rules, as pure functions: what a ticket must carry, what an order
lookup must say before the agent may go on, which remedy a carrier's status makes due, and what the
customer is told. A bad field raises Invalid, whose message says why (quoting the input, bounded)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from wakeful.examples.shop import REF, STATUSES
from wakeful.schemas.base import cut

MAX_AMOUNT = 10**15  # minor units; every sum stays exact in 64 bits
MAX_MESSAGE = 4000  # characters of the customer's own words, kept as untrusted evidence
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# What the record keeps of the lookups, beside the state an approval binds (the task's refs).
PARCEL, IN_STOCK, STATUS, REMEDY, NOTICE = "parcel", "in_stock", "carrier_status", "remedy", "notice"


class Invalid(ValueError):
    """A field from outside that the support agent does not accept; the message says why."""


def shown(raw: Any) -> str:
    if isinstance(raw, int) and not isinstance(raw, bool) and raw.bit_length() > 64:
        return f"an integer of {raw.bit_length()} bits"  # its digits may be too many to print
    return cut(repr(raw), 40)


def order_id(raw: Any) -> str:
    if isinstance(raw, str) and re.fullmatch(REF, raw):
        return raw
    raise Invalid(f"order_id must be 1 to 64 letters, digits, '_', '.' or '-', got {shown(raw)}")


def amount(raw: Any) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool) and 0 < raw <= MAX_AMOUNT:
        return raw
    raise Invalid(f"amount must be a whole number from 1 to {MAX_AMOUNT}, got {shown(raw)}")


def currency(raw: Any) -> str:
    if isinstance(raw, str) and re.fullmatch(r"[A-Za-z]{3}", raw):
        return raw.upper()
    raise Invalid(f"currency must be a 3-letter code, got {shown(raw)}")


def message(raw: Any) -> str | None:
    """The customer's own words, or None: text of at most MAX_MESSAGE characters, no control ones."""
    if raw is None:
        return None
    if isinstance(raw, str) and 0 < len(raw) <= MAX_MESSAGE and not _CONTROL.search(raw):
        return raw
    raise Invalid(f"message must be text of 1 to {MAX_MESSAGE} characters without control characters")


def order_found(result: Mapping[str, Any], ticket: tuple[str, int, str]) -> dict[str, str]:
    """What the record keeps of the shop's answer to find_order (its parcel, whether the item is in
    stock), once the order is the ticket's: the same order, at the amount and currency the ticket
    (and any approval of it) names. Invalid says why not: a person looks at it."""
    wanted, paid, money = ticket
    if result.get("found") != "yes":
        raise Invalid(f"the shop has no order {wanted}")
    if result.get("order_id") != wanted:
        raise Invalid(f"the shop answered for order {shown(result.get('order_id'))}, not {wanted}")
    said = (result.get("amount"), result.get("currency"))
    if said != (str(paid), money):
        raise Invalid(f"the shop's order {wanted} is {said[0]} {said[1]}, the ticket says {paid} {money}")
    parcel, stock = result.get("parcel"), result.get("in_stock")
    if not isinstance(parcel, str) or not re.fullmatch(REF, parcel) or stock not in ("true", "false"):
        raise Invalid(f"the shop's answer for order {wanted} has no usable parcel and stock")
    return {PARCEL: parcel, IN_STOCK: "yes" if stock == "true" else "no"}


def carrier_status(result: Mapping[str, Any], parcel: str) -> str:
    """The status of the parcel the order went in, as the carrier reports it (one of STATUSES)."""
    if result.get("parcel") != parcel:
        raise Invalid(f"the carrier answered for parcel {shown(result.get('parcel'))}, not {parcel}")
    status = result.get("status")
    if status not in STATUSES:
        raise Invalid(f"the carrier's status {shown(status)} for parcel {parcel} is none the agent knows")
    return str(status)


def remedy_due(status: str, in_stock: bool) -> str | None:
    """What the customer is owed for a parcel in `status`: a parcel lost is replaced while the
    item is in stock, else refunded; a damaged one is refunded; one delivered or on its way is
    owed nothing but a word."""
    if status == "lost":
        return "replacement" if in_stock else "refund"
    if status == "damaged":
        return "refund"
    if status in ("delivered", "in_transit"):
        return None
    raise Invalid(f"no remedy rule for a parcel {shown(status)}")


def notice(order: str, status: str | None, remedy: str | None) -> str | None:
    """The message the record makes for the customer, once the parcel's status is known."""
    if status is None:
        return None
    said = {
        "lost": "was lost in transit",
        "damaged": "arrived damaged",
        "delivered": "was delivered, as its carrier reports",
        "in_transit": "is on its way with its carrier",
    }.get(status, "was looked into")
    done = {"refund": " We have refunded what you paid.", "replacement": " We are sending a replacement."}
    return f"Your order {order} {said}.{done.get(remedy or '', '')}"
