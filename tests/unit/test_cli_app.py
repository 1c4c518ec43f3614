"""`--app` and the signers follow the app a command is given: checked before anything runs, handed
on to every process started from here, and no signer registered for a kind the app does not know."""

from __future__ import annotations

import base64
import dataclasses
import os

import click
import orjson
import pytest
from click.testing import CliRunner
from contract_app import NOTARY, SIGNED, contract
from contract_app import app as contract_app

from wakeful.authority.snapshot import check_signer, decode_signer
from wakeful.cli.app_option import app_option
from wakeful.cli.task_cmds import show_lines
from wakeful.core.errors import ConfigError
from wakeful.core.settings import Settings
from wakeful.examples.refund import app as refund_app
from wakeful.operate.dev_signers import DEV_SIGNERS, REQUESTER, dev_signers
from wakeful.schemas import events
from wakeful.sdk import ANYONE, APPROVERS, Accept, App
from wakeful.sdk import REQUESTER as REQUESTER_ROLE
from wakeful.sdk.app import DEFAULT_APP, ENV


@click.command()
@app_option
@click.pass_obj
def shows_its_app(settings: Settings) -> None:
    click.echo(f"{settings.app}|{os.environ.get(ENV)}")


def invoke(*args: str) -> tuple[int, str, BaseException | None]:
    result = CliRunner().invoke(shows_its_app, list(args), obj=Settings.from_env(), standalone_mode=False)
    return result.exit_code, result.output.strip(), result.exception


@pytest.fixture(autouse=True)
def restore_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, DEFAULT_APP)  # recorded, so whatever the option sets is undone after
    monkeypatch.delenv(ENV)


def test_app_option_hands_the_app_to_this_process_and_to_every_process_it_starts() -> None:
    code, out, _ = invoke("--app", "contract_app:app")
    assert (code, out) == (0, "contract_app:app|contract_app:app")


def test_without_app_option_the_settings_and_environment_are_left_as_they_were() -> None:
    code, out, _ = invoke()
    assert (code, out) == (0, "None|None")


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("not.a:module", "--app: cannot import 'not.a'"),
        ("nocolon", "--app: 'nocolon' is not module:attribute"),
        ("contract_app:Contract", "--app: 'contract_app:Contract' is ModelMetaclass, not a wakeful.sdk.App"),
        ("contract_app:nothing", "--app: 'contract_app:nothing' is NoneType"),
    ],
)
def test_a_bad_app_is_one_config_error_naming_the_option_and_changes_nothing(spec: str, problem: str) -> None:
    code, _, exc = invoke("--app", spec)
    assert code != 0 and isinstance(exc, ConfigError) and str(exc).startswith(problem), exc
    assert "\n" not in str(exc) and os.environ.get(ENV) is None


def test_a_bad_wakeful_app_names_the_variable_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "not.a:module")
    _, _, exc = invoke()
    assert isinstance(exc, ConfigError) and exc.setting == ENV


def test_dev_signers_of_the_bundled_app_are_todays_dev_signers() -> None:
    assert dev_signers(refund_app) == {p: frozenset(kinds) for p, kinds in DEV_SIGNERS.items()}


def test_a_principal_an_app_accepts_events_from_gets_a_dev_signer_for_those_kinds_only() -> None:
    found = dev_signers(contract_app)
    assert found[NOTARY] == {SIGNED}
    assert events.AMEND not in found[REQUESTER]  # the contract app does not know the refund's kind
    assert all(kinds <= contract_app.kinds for kinds in found.values())


def test_the_dev_requester_and_approvers_may_send_the_app_kinds_their_roles_may() -> None:
    wf = dataclasses.replace(
        contract,
        events={
            "doc.uploaded": Accept(contract.events[SIGNED].decide, signers=(REQUESTER_ROLE,)),
            "doc.flagged": Accept(contract.events[SIGNED].decide, signers=(ANYONE,)),
            "doc.cleared": Accept(contract.events[SIGNED].decide, signers=(APPROVERS, "principal:kyc")),
        },
    )
    found = dev_signers(App(name="docs", workflows=[wf]))
    assert {"doc.uploaded", "doc.flagged"} <= found[REQUESTER] and "doc.cleared" not in found[REQUESTER]
    assert "doc.cleared" in found["alice"] and "doc.cleared" in found["bob"]
    assert found["kyc"] == {"doc.cleared"} and "doc.cleared" not in found["mallory"]


@pytest.mark.parametrize(
    ("kinds", "tenant", "setting"),
    [
        ((SIGNED,), "default", "kinds"),  # the refund app does not know the contract's kind
        (("task.delete",), "default", "kinds"),
        ((events.APPROVE,), "", "tenant"),
        ((events.APPROVE,), "a b", "tenant"),
        ((events.APPROVE,), "t" * 65, "tenant"),
    ],
)
def test_a_signer_for_a_kind_the_app_does_not_know_or_a_bad_tenant_is_refused(
    kinds: tuple[str, ...], tenant: str, setting: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        check_signer(kinds, refund_app.kinds, tenant)
    assert caught.value.setting == setting


def test_a_signer_for_the_apps_own_kind_and_a_tenant_is_accepted() -> None:
    check_signer((SIGNED, events.CREATE), contract_app.kinds, "acme")


def test_a_signer_record_from_before_tenants_signs_for_the_default_tenant() -> None:
    old = {
        "principal": "crm",
        "alg": "ed25519",
        "material": base64.b64encode(b"k" * 32).decode(),
        "kinds": [],
    }
    key, kinds = decode_signer("key-crm", orjson.dumps(old))
    assert (key.principal, key.tenant, kinds) == ("crm", "default", frozenset())
    key, _ = decode_signer("key-crm", orjson.dumps(old | {"tenant": "acme"}))
    assert key.tenant == "acme"


def test_task_show_gives_a_line_to_each_wait_action_and_effect() -> None:
    shown = {
        "id": "t-1",
        "stage": "ready",
        "pending_waits": [
            {
                "wait_for": "approval",
                "bound_to_version": 2,
                "allowed_signers": ["alice", "bob"],
                "deadline": "2030-01-01T00:00:00+00:00",
                "on_deadline": "expire",
                "correlation_id": "corr-1",
            }
        ],
        "versions": {"policy": "p"},
        "actions": {
            "BOOK:t-1:v1": {"status": "succeeded", "result": {"booking": "B-1"}},
            "BOOK:t-1:v2": {"status": "in_flight", "attempts": 2},
        },
        "effects": {"BOOK:t-1:v1": {"booking": "B-1"}, "BOOK:t-1:v2": None},
    }
    assert show_lines(shown) == [
        "id: t-1",
        "stage: ready",
        "waits for: approval of version 2 by alice, bob until 2030-01-01T00:00:00+00:00, then expire "
        "(correlation id corr-1)",
        "action: BOOK:t-1:v1 succeeded {'booking': 'B-1'}",
        "action: BOOK:t-1:v2 in_flight (tool unavailable at 2 calls)",
        "effect: BOOK:t-1:v1 -> {'booking': 'B-1'}",
        "effect: BOOK:t-1:v2 -> nothing done",
    ]


def test_task_show_says_how_many_of_a_quorum_are_counted_and_who() -> None:
    wait = {
        "wait_for": "approval",
        "bound_to_version": 1,
        "allowed_signers": ["role:approver"],
        "deadline": "2030-01-01T00:00:00+00:00",
        "on_deadline": "escalate:ops",
        "correlation_id": "corr-1",
        "count": 2,
        "counted": ["alice"],
    }
    [line] = show_lines({"id": "t-1", "pending_waits": [wait], "actions": {}, "effects": {}})[1:]
    assert line.endswith("(correlation id corr-1); 1 of 2 counted (alice)"), line
