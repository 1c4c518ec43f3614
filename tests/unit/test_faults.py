"""Fault points fire where and when they are armed: once, at the N-th pass for `POINT@N`; a
mistake in the setting is an error at start-up, never a silent no-op."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from wakeful.core import faults
from wakeful.core.errors import ConfigError


@pytest.fixture()
def killed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    sent: list[int] = []
    monkeypatch.setattr(os, "kill", lambda _pid, sig: sent.append(sig))
    yield sent
    faults.arm(None)


@pytest.mark.parametrize(
    ("setting", "fires_at"), [("executor.after_intent", 1), ("executor.after_intent@3", 3)]
)
def test_an_armed_point_fires_once_at_the_pass_it_names(
    killed: list[int], setting: str, fires_at: int
) -> None:
    faults.arm(setting)
    passes = []
    for n in range(1, 6):
        before = len(killed)
        faults.fault("executor.after_intent")
        faults.fault("executor.after_advance")  # not armed: never fires
        if len(killed) > before:
            passes.append(n)
    assert passes == [fires_at] and killed == [signal.SIGKILL]


def test_a_stop_point_at_a_later_pass_stops_instead(killed: list[int]) -> None:
    faults.arm("executor.after_downstream_call@2:stop")
    faults.fault("executor.after_downstream_call")
    faults.fault("executor.after_downstream_call")
    assert killed == [signal.SIGSTOP]


@pytest.mark.parametrize(
    "setting", ["executor.after_intent@0", "executor.after_intent@x", "executor.after_intent@", "nowhere@2"]
)
def test_a_setting_that_names_no_point_or_pass_is_refused_at_start(setting: str) -> None:
    with pytest.raises(ConfigError):
        faults.arm(setting)
    faults.arm(None)
