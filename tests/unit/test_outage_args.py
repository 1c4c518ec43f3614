"""What `wakeful chaos --outage TARGETS --for DURATION` takes, and what it refuses with a clear error."""

from __future__ import annotations

from typing import cast

import pytest

from wakeful.bench import outage
from wakeful.consumers.kafka.supervisor import ROLES
from wakeful.core.errors import ConfigError
from wakeful.core.settings import Settings
from wakeful.devstack import stack


@pytest.mark.parametrize(
    ("said", "targets"),
    [
        (["inbound"], ("inbound",)),
        (["gate,executor"], ("gate", "executor")),
        (["all"], ROLES),
        (["all,redis"], (*ROLES, "redis")),
        (["gate, gate ,kafka"], ("gate", "kafka")),
    ],
)
def test_an_outage_names_roles_every_role_or_a_server_once_each(
    said: list[str], targets: tuple[str, ...]
) -> None:
    assert outage.targets_of(said) == targets


@pytest.mark.parametrize("said", [["ingres"], [""], [","], ["gate,postgres"]])
def test_an_unknown_target_is_refused_naming_every_target_there_is(said: list[str]) -> None:
    with pytest.raises(ConfigError) as refused:
        outage.targets_of(said)
    assert (
        "--outage" in str(refused.value) and "inbound" in str(refused.value) and "redis" in str(refused.value)
    )


@pytest.mark.parametrize(
    ("said", "seconds"), [("30", 30), ("30s", 30), ("5m", 300), ("1h", 3600), ("1.5m", 90)]
)
def test_a_duration_is_seconds_minutes_or_hours(said: str, seconds: float) -> None:
    assert outage.duration(said) == seconds


@pytest.mark.parametrize("said", ["", "0", "-5s", "soon", "2d", "200h"])
def test_a_duration_that_is_none_is_refused_with_what_to_say(said: str) -> None:
    with pytest.raises(ConfigError, match="--for"):
        outage.duration(said)


def test_servers_are_brought_back_by_dev_up_run_again_after_one_that_timed_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broker that answers metadata may still time out the first admin calls after its restart
    on a busy box (an empty TimeoutError): the drill runs `dev up` again, as an operator would."""
    runs: list[int] = []

    def up(_settings: object, _say: object) -> None:
        runs.append(1)
        if len(runs) < 2:
            raise TimeoutError()

    monkeypatch.setattr(stack, "up", up)
    said: list[str] = []
    outage._servers_up(cast(Settings, None), said.append)
    assert len(runs) == 2 and said == ["dev up failed (TimeoutError()); again (2 of 3) ..."]
    runs.clear()
    monkeypatch.setattr(stack, "up", lambda *_: (_ for _ in ()).throw(TimeoutError()))
    with pytest.raises(TimeoutError):
        outage._servers_up(cast(Settings, None), said.append)
