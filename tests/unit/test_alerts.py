"""The alerts (compose/prometheus/alerts.yml): promtool accepts the file and its unit tests pass
(compose/prometheus/alerts_test.yml: every alert firing on recorded series, and not), there is one
alert for each signal the runtime must page on, each with a severity and a runbook anchor that
docs/alerts.md has, and every series a rule selects is a metric the code defines, by labels it
has, with values its label can take. The roles exposing those metrics: tests/test_alerts_stack.py."""

from __future__ import annotations

import re

import pytest
from alert_rules import DOC, RULE_TESTS, RULES, alerts, anchor, family, promtool, selectors
from prometheus_client import Counter, Histogram
from prometheus_client.metrics import MetricWrapperBase

from wakeful.core import errors, metrics
from wakeful.core.metrics_pure import INTEGRITY_REASONS, QUARANTINE_REASONS, REASONS

# The alerts the article on durable agents lists, each by the rule that raises it.
PAGED = {
    "unexpected tool use": "WakefulUnexpectedToolUse",
    "version mismatches on resume": "WakefulVersionMismatchOnResume",
    "repeated authorization failures": "WakefulRepeatedAuthorizationFailures",
    "integrity-check failures": "WakefulIntegrityCheckFailed",
    "unusual egress": "WakefulUnusualEgress",
    "tasks past their deadline": "WakefulTasksPastDeadline",
    "resumes from the wrong tenant": "WakefulWrongTenantResume",
}
# The alerts a paged signal rests on: an alert that says one of the above cannot fire.
SUPPORTING = {"the task gauges the deadline alert reads are fresh": "WakefulTaskGaugesStale"}
# The values a label of a rule's selector may name, where the code keeps them to a fixed set.
VALUES = {
    ("wakeful_quarantines_total", "reason"): set(QUARANTINE_REASONS),
    ("wakeful_messages_dead_lettered_total", "reason"): set(REASONS),
    ("wakeful_events_refused_total", "reason"): set(REASONS),
    ("wakeful_waits_due", "within"): {"overdue", "1m", "1h"},
    ("wakeful_wrong_tenant_events_total", "role"): {"gate", "inbound"},
}


def _defined() -> dict[str, MetricWrapperBase]:
    """Each metric of the process by the name a query uses (a counter's with `_total`)."""
    found = [m for m in vars(metrics).values() if isinstance(m, MetricWrapperBase)]
    return {m._name + ("_total" if isinstance(m, Counter) else ""): m for m in found}


@pytest.mark.timeout(90)
def test_promtool_accepts_the_rules_and_every_alert_fires_and_resolves_on_recorded_series() -> None:
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in checked.stdout
    tested = promtool("test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout
    tested_alerts = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert tested_alerts == {a["alert"] for a in alerts()}, "an alert that alerts_test.yml never evaluates"


def test_each_signal_to_page_on_has_one_alert_with_a_severity_and_a_runbook_in_the_docs() -> None:
    rules = {a["alert"]: a for a in alerts()}
    assert sorted(rules) == sorted([*PAGED.values(), *SUPPORTING.values()])
    doc = DOC.read_text()
    anchors = {anchor(h) for h in re.findall(r"^##+ (.+)$", doc, re.MULTILINE)}
    for name, rule in rules.items():
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["summary"], name
        page, _, at = rule["annotations"]["runbook_url"].partition("#")
        assert page == "docs/alerts.md" and at in anchors, f"{name}: no heading for #{at} in docs/alerts.md"
        assert f"`{name}`" in doc, f"docs/alerts.md does not name {name}"


def test_every_series_a_rule_selects_is_a_defined_metric_by_its_own_labels_and_values() -> None:
    defined = _defined()
    histograms = frozenset(m._name for m in defined.values() if isinstance(m, Histogram))
    for rule in alerts():
        for name, matchers in selectors(rule["expr"]):
            metric = defined.get(family(name, histograms))
            assert metric is not None, f"{rule['alert']} selects {name}, which no module defines"
            for label, _, value in matchers:
                assert label in metric._labelnames, f"{rule['alert']}: {name} has no label {label}"
                allowed = VALUES.get((name, label))
                if allowed is not None:
                    named = set(value.split("|"))
                    assert named <= allowed, f"{rule['alert']}: {name} {label} is never {named - allowed}"


def test_the_integrity_alert_names_every_integrity_reason_and_the_version_alert_the_rest() -> None:
    """A new kind of failed integrity check (an IntegrityError's reason code) must page: its code
    is one of INTEGRITY_REASONS, which the integrity alert selects, or "schema", which the
    version alert does."""
    kinds: list[type[errors.IntegrityError]] = [errors.IntegrityError, *_subclasses(errors.IntegrityError)]
    codes = {kind.reason_code for kind in kinds}
    assert codes <= {*INTEGRITY_REASONS, "schema"}
    rules = {a["alert"]: a["expr"] for a in alerts()}
    picked = {
        alert: {v for name, ms in selectors(expr) for _, _, v in ms if name == "wakeful_quarantines_total"}
        for alert, expr in rules.items()
    }
    assert picked["WakefulIntegrityCheckFailed"] == {"|".join(INTEGRITY_REASONS)}
    assert picked["WakefulVersionMismatchOnResume"] == {"incompatible|schema"}


def _subclasses(cls: type[errors.IntegrityError]) -> list[type[errors.IntegrityError]]:
    found: list[type[errors.IntegrityError]] = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found
