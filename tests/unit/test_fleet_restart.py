"""A fleet run as `wakeful worker all` runs its roles (Fleet(restart_failed=True)) starts again a
role that gave up, and never one a test killed or stopped on purpose."""

from __future__ import annotations

import signal

import pytest

from wakeful.devstack.fleet import gave_up


@pytest.mark.parametrize(
    ("code", "again"),
    [(1, True), (2, True), (None, False), (0, False), (-signal.SIGKILL, False), (-signal.SIGTERM, False)],
)
def test_only_a_role_that_exited_with_an_error_is_started_again(code: int | None, again: bool) -> None:
    assert gave_up(code) is again
