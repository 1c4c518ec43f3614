"""The reference downstream "bank": a ledger that honours idempotency keys and fencing tokens."""
