"""A receipt's reason is bounded, whatever input it quotes: short ones are kept whole (a refusal
quoting a huge input, on the real pipeline: tests/test_review_holes.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from wakeful.schemas import receipt as receipts


@given(st.text(max_size=3 * receipts.REASON_MAX))
def test_a_receipt_reason_is_bounded_and_short_ones_are_kept_whole(reason: str) -> None:
    kept = receipts.bounded(reason)
    assert (
        kept == reason
        if len(reason) <= receipts.REASON_MAX
        else kept.startswith(reason[: receipts.REASON_MAX])
    )
    assert len(kept) <= receipts.REASON_MAX + 40
