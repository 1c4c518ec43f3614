"""The downstream systems the example apps' tools call, kept in the stack's own Redis for local runs:
the refund's bank, the onboarding's supplier register and the support agent's shop
(WAKEFUL_DOWNSTREAMS names this tuple by default; state/downstreams.py says what the runtime does
with it)."""

from __future__ import annotations

from wakeful.examples import bank, shop, suppliers_keys

DOWNSTREAMS = (bank.DOWNSTREAM, suppliers_keys.DOWNSTREAM, shop.DOWNSTREAM)
