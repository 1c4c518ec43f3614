"""What a step's run under the egress guard comes to (consumers/executor/guarding.receipt, D116):
enforced, a refusal fails the step naming what was tried; reporting only, the step goes on and
what was tried is still counted and logged; nothing tried outside, nothing said."""

from __future__ import annotations

from wakeful.consumers.executor import guarding
from wakeful.core.egress import resolve
from wakeful.core.egress_guard import Confinement


def run(*, report: bool, tried: list[str]) -> Confinement:
    found = Confinement(resolve("fetch_page", ["pages"], {}), "egress", report=report)
    found.refused += tried
    return found


def test_an_enforced_refusal_fails_the_step_naming_what_was_tried() -> None:
    said = guarding.receipt(run(report=False, tried=["evil.example:25", "evil.example:25"]), "t-1")
    assert said == "egress refused: fetch_page tried evil.example:25, outside its declared egress (pages)"


def test_reporting_only_lets_the_step_go_on() -> None:
    assert guarding.receipt(run(report=True, tried=["evil.example:25"]), "t-1") is None


def test_a_run_that_tried_nothing_outside_says_nothing() -> None:
    assert guarding.receipt(run(report=False, tried=[]), "t-1") is None
    assert guarding.receipt(None, "t-1") is None
