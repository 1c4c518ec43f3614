"""The downstream systems the example apps' tools call, kept in the stack's own Redis for local runs:
the refund's bank and the onboarding's supplier register (WAKEFUL_DOWNSTREAMS names this tuple by
default; state/downstreams.py says what the runtime does with it)."""

from __future__ import annotations

from wakeful.examples import bank, suppliers_keys

DOWNSTREAMS = (bank.DOWNSTREAM, suppliers_keys.DOWNSTREAM)
