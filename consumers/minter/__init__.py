"""The minter: the one process that makes per-step Redis users for the executor's tools (D120)."""
