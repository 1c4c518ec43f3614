"""The reference supplier register behind the onboarding tools, against the real Redis: one outcome
per op key, stale fences refused, faults write nothing, undo once, and pay only the account on
record."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
import redis
from helpers import command, downstream_as, downstream_login
from unit.test_onboarding_rules import SCHEDULING, at

from wakeful.core import minting
from wakeful.core.minting import Credential
from wakeful.core.settings import Settings
from wakeful.examples import bank
from wakeful.examples import onboarding as onb
from wakeful.examples import suppliers_keys as register_keys
from wakeful.examples.onboarding_tools import (
    PaymentArgs,
    RegisterArgs,
    RegisterSupplier,
    ScheduleFirstPayment,
)
from wakeful.examples.suppliers import Payment, Registration, Removal, Suppliers
from wakeful.sdk import Compensate, ToolFenced, ToolRefused, ToolUnavailable
from wakeful.state import acl, keys

NOPERM = redis.exceptions.NoPermissionError
ACCOUNT = "DE89370400440532013000"
PLANTED = "GB82WEST12345698765432"


@pytest.fixture(autouse=True)
def static_login(settings: Settings, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tools are called here directly, with no executor to mint them a user per step (D120):
    each run is handed a user of the register's rights instead, in every thread."""
    made = Credential(*downstream_login(settings, "suppliers"), 0)
    monkeypatch.setattr(minting, "credential", lambda: made)


@pytest.fixture(scope="module")
def register(settings: Settings, redis_url: str) -> RegisterSupplier:
    tool = RegisterSupplier()
    tool.connect(settings)
    return tool


@pytest.fixture(scope="module")
def pay(settings: Settings, redis_url: str) -> ScheduleFirstPayment:
    tool = ScheduleFirstPayment()
    tool.connect(settings)
    return tool


@pytest.fixture(scope="module")
def suppliers(settings: Settings, redis_url: str) -> Suppliers:
    return Suppliers(downstream_as(settings, "suppliers"))


@pytest.fixture()
def task() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def reg_args(task: str, **override: Any) -> RegisterArgs:
    return RegisterArgs(**{"task_id": task, "legal_name": "Acme Tools GmbH", "account": ACCOUNT, **override})


def pay_args(task: str, supplier_id: str, **override: Any) -> PaymentArgs:
    fields = {
        "task_id": task,
        "supplier_id": supplier_id,
        "account": ACCOUNT,
        "amount": 5000,
        "currency": "EUR",
    }
    return PaymentArgs(**{**fields, **override})


def registered(register: RegisterSupplier, task: str, fence: int = 1) -> tuple[str, str]:
    op = register.key_for(task, 1)
    return op, register.call(op, reg_args(task), fence)["supplier_id"]


def test_a_replayed_registration_returns_the_first_and_registers_once(
    register: RegisterSupplier, suppliers: Suppliers, task: str
) -> None:
    op, supplier = registered(register, task)
    assert register.call(op, reg_args(task, legal_name="Someone Else", account=PLANTED), 1) == {
        "supplier_id": supplier
    }
    [entry] = suppliers.entries(task)
    assert isinstance(entry, Registration) and (entry.legal_name, entry.account) == (
        "Acme Tools GmbH",
        ACCOUNT,
    )
    assert register.lookup(op) == {"supplier_id": supplier}


def test_concurrent_registrations_under_one_op_key_register_exactly_one(
    register: RegisterSupplier, suppliers: Suppliers, task: str
) -> None:
    op, start = register.key_for(task, 1), threading.Barrier(12)
    results: list[Any] = []

    def call() -> None:
        start.wait()
        try:
            results.append(register.call(op, reg_args(task), 1))
        except BaseException as exc:  # reported below; a thread's exception is otherwise lost
            results.append(exc)

    threads = [threading.Thread(target=call) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 12 and all(r == results[0] for r in results), results
    assert len(suppliers.entries(task)) == 1


def test_a_stale_fence_is_fenced_off_and_writes_nothing(
    register: RegisterSupplier, pay: ScheduleFirstPayment, suppliers: Suppliers, task: str
) -> None:
    op, supplier = registered(register, task, fence=5)
    with pytest.raises(ToolFenced):
        pay.call(pay.key_for(task, 1), pay_args(task, supplier), 4)
    with pytest.raises(ToolFenced):
        register.call(op, reg_args(task), 4)  # not even a replay for a stale holder
    with pytest.raises(ToolFenced):
        register.undo(op, reg_args(task), 4)
    assert pay.lookup(pay.key_for(task, 1)) is None and len(suppliers.entries(task)) == 1
    assert pay.call(pay.key_for(task, 1), pay_args(task, supplier), 6)["payment_id"].startswith("P-")


def test_transient_faults_fail_the_first_calls_then_one_registration_lands(
    register: RegisterSupplier, suppliers: Suppliers, redis_client: redis.Redis, task: str
) -> None:
    redis_client.hset(register_keys.faults_key(task), "register", 2)
    op = register.key_for(task, 1)
    for _ in range(2):
        with pytest.raises(ToolUnavailable, match="injected fault"):
            register.call(op, reg_args(task), 1)
        assert register.lookup(op) is None and suppliers.entries(task) == []
    assert register.call(op, reg_args(task), 1) == register.lookup(op)
    assert len(suppliers.entries(task)) == 1


def test_a_first_payment_refused_for_good_is_compensated_by_one_undo(
    register: RegisterSupplier,
    pay: ScheduleFirstPayment,
    suppliers: Suppliers,
    redis_client: redis.Redis,
    task: str,
) -> None:
    op, supplier = registered(register, task)
    redis_client.hset(register_keys.faults_key(task), "schedule", "refuse")
    with pytest.raises(ToolRefused) as refused:
        pay.call(pay.key_for(task, 1), pay_args(task, supplier), 1)
    assert pay.lookup(pay.key_for(task, 1)) is None
    at_scheduling = at(onb.SCHEDULING, **{**SCHEDULING, "supplier_id": supplier})
    decision = onb.failed(at_scheduling, ScheduleFirstPayment.name, str(refused.value))
    assert isinstance(decision, Compensate) and decision.tools == (RegisterSupplier.name,)
    first = register.undo(op, reg_args(task), 1)
    assert first == {"removed": supplier} and register.undo(op, reg_args(task), 1) == first
    found = suppliers.supplier(supplier)
    assert found is not None and found.status == "removed"
    assert [type(e) for e in suppliers.entries(task)] == [Registration, Removal]


def test_a_payment_goes_only_to_the_account_on_record(
    register: RegisterSupplier, pay: ScheduleFirstPayment, suppliers: Suppliers, task: str
) -> None:
    _, supplier = registered(register, task)
    with pytest.raises(ToolRefused, match=r"not .* account on record"):
        pay.call(pay.key_for(task, 1), pay_args(task, supplier, account=PLANTED), 1)
    assert not [e for e in suppliers.entries(task) if isinstance(e, Payment)]


def test_undo_before_the_registration_lands_keeps_it_from_ever_landing(
    register: RegisterSupplier, suppliers: Suppliers, task: str
) -> None:
    op = register.key_for(task, 1)
    assert register.undo(op, reg_args(task), 1) == {"removed": "nothing had been registered"}
    with pytest.raises(ToolRefused, match="undone before it landed"):
        register.call(op, reg_args(task), 1)
    assert register.lookup(op) is None and [type(e) for e in suppliers.entries(task)] == [Removal]


def test_undo_is_refused_while_a_payment_is_scheduled(
    register: RegisterSupplier, pay: ScheduleFirstPayment, suppliers: Suppliers, task: str
) -> None:
    op, supplier = registered(register, task)
    paid = pay.call(pay.key_for(task, 1), pay_args(task, supplier), 1)
    assert pay.lookup(pay.key_for(task, 1)) == paid
    with pytest.raises(ToolRefused, match="payment scheduled"):
        register.undo(op, reg_args(task), 1)
    with pytest.raises(ToolRefused, match="first payment is"):
        pay.call(pay.key_for(task, 2), pay_args(task, supplier), 1)  # one first payment per supplier
    assert register.lookup(pay.key_for(task, 1)) is None  # each tool answers only for its own kind
    found = suppliers.supplier(supplier)
    assert found is not None and found.status == "active"


def test_the_suppliers_credential_reaches_only_its_own_keys(settings: Settings, task: str) -> None:
    own = downstream_as(settings, "suppliers")
    for attempt in (
        ("GET", keys.state(task)),
        ("SET", bank.entry_key(f"REFUND:{task}:v1"), "{}"),
        ("DEL", register_keys.fence_key(task)),
        ("EVAL", "return 1", "0"),
        ("FLUSHALL",),
        ("KEYS", "*"),
    ):
        with pytest.raises(NOPERM):
            command(own, *attempt)
    for other in (
        *(acl.connect(settings, role) for role in ("gate", "executor", "proposer")),
        downstream_as(settings, "bank"),
    ):
        with pytest.raises(NOPERM):
            other.get(register_keys.fence_key(task))
