"""docs/compose.md held to compose/docker-compose.yml: its Services table has a row for every
service the file defines, and none the file lacks; the services it says see the admin's folder
are those that mount it; and the init service's passwords are named for every Redis user and Kafka
principal the code has."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from compose_file import load_compose, mounts, secret_place

from wakeful.core import kafka_rights
from wakeful.core.settings import Settings
from wakeful.state import acl

pytestmark = pytest.mark.timeout(30)

PAGE = (Path(__file__).resolve().parents[2] / "docs/compose.md").read_text()


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return load_compose()


def table_services() -> set[str]:
    """The services the page's Services table names in its first column (`a`, `b` in one row; a
    note in parentheses, such as a profile, is not a service)."""
    section = PAGE.split("## Services", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        cells = line.strip().strip("|").split("|")
        if line.startswith("| `"):
            names |= set(re.findall(r"`([a-z][a-z0-9-]*)`", re.sub(r"\(.*?\)", "", cells[0])))
    return names


def test_the_services_table_has_a_row_for_every_service_of_the_file(doc: dict[str, Any]) -> None:
    assert table_services() == set(doc["services"])


def test_the_page_names_every_service_that_sees_the_admin_folder(doc: dict[str, Any]) -> None:
    admin = secret_place(doc, "init", "redis:admin")
    assert admin is not None
    seen = {n for n, s in doc["services"].items() if admin.volume in {m.volume for m in mounts(doc, s)}}
    said = re.search(r"the admin's folder reaches only (.*?);", PAGE, re.DOTALL)
    assert said is not None and set(re.findall(r"`([a-z-]+)`", said.group(1))) == seen


def names_between(start: str, end: str) -> set[str]:
    """The comma-separated names (the last after "and") the page gives between `start` and `end`."""
    text = " ".join(PAGE.split()).split(start, 1)[1].split(end, 1)[0]
    return {name.strip() for name in re.split(r",| and ", text) if name.strip()}


def test_init_makes_a_redis_password_for_every_acl_user_the_page_names() -> None:
    named = names_between("ACL user of `state/acl.py` (", ")")
    # the roles only: the reference downstreams have no static user (D125)
    assert named == set(acl.users(Settings.from_env({}))) == set(acl.ROLES)


def test_init_makes_a_kafka_password_for_every_role_the_page_names() -> None:
    assert names_between("`secrets-<role>` volume of each of ", "):") == set(kafka_rights.ROLES)
