"""Which app a policy command names, and whether its deploy can be checked against the app's
schema: `--app` as a name or as the app to load, else the loaded app. No Redis, no Kafka."""

from __future__ import annotations

import pytest

from wakeful.cli.policy_cmds import app_name, schema_check
from wakeful.core.settings import Settings
from wakeful.examples.onboarding import app as onboarding
from wakeful.examples.refund import app as refund

pytestmark = pytest.mark.unit

LOADED = Settings.from_env({})  # the bundled refund app
ONBOARDING = "wakeful.examples.onboarding:app"


@pytest.fixture(autouse=True)
def _no_app_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WAKEFUL_APP", raising=False)  # another test's --app may have left one


@pytest.mark.parametrize(
    ("given", "named"),
    [(None, "refund"), ("refund", "refund"), ("expenses", "expenses"), (ONBOARDING, "supplier_onboarding")],
)
def test_a_policy_command_names_its_app_by_name_or_by_the_app_it_loads(given: str | None, named: str) -> None:
    assert app_name(LOADED, given) == named


@pytest.mark.parametrize(
    ("given", "checks"),
    [(None, "refund"), ("refund", "refund"), (ONBOARDING, "supplier_onboarding"), ("expenses", None)],
)
def test_a_deploy_is_checked_against_the_schema_of_an_app_this_process_loads(
    given: str | None, checks: str | None
) -> None:
    check = schema_check(LOADED, given, app_name(LOADED, given))
    if checks is None:
        assert check is None
        return
    assert check is not None
    own = {"refund": refund, "supplier_onboarding": onboarding}[checks]
    assert check(str(own.policy)) == []
    assert check('permit (principal, action == Action::"nope", resource);') != []
    other = onboarding if own is refund else refund
    assert check(str(other.policy)) != []  # each app's actions are its own
