"""Workflows: pure decisions over checkpoints (the refund workflow is the reference)."""
