"""compose/prometheus/alerts.yml as the tests read it: its alerts, the series selectors in their
expressions, a selector's match against a scraped sample, and promtool, which must be installed
(`bash scripts/setup` installs Debian's prometheus package, which carries it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "compose" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "compose" / "prometheus" / "alerts_test.yml"
DOC = ROOT / "docs" / "alerts.md"
SETUP = "bash scripts/setup"

SELECTOR = re.compile(r"\b(wakeful_[a-z0-9_]+)\s*(?:\{([^}]*)\})?")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
SAMPLE = re.compile(r"^(wakeful_[a-z0-9_]+)(?:\{([^}]*)\})? (\S+)$", re.MULTILINE)

Matcher = tuple[str, str, str]  # (label, operator, value)


def alerts() -> list[dict[str, Any]]:
    """Every alerting rule of every group, as the YAML gives it."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def selectors(expr: str) -> list[tuple[str, list[Matcher]]]:
    """Each series selector in a PromQL expression: the metric's name and its label matchers."""
    return [(name, MATCHER.findall(inside or "")) for name, inside in SELECTOR.findall(expr)]


def family(name: str, histograms: frozenset[str] = frozenset()) -> str:
    """The name a family is exposed under: a histogram's series (`_bucket`, `_sum`, `_count`) are
    its own name's; a counter's `_total` is the name of its family in the text format."""
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name.removesuffix(suffix) in histograms:
            return name.removesuffix(suffix)
    return name


def matches(labels: dict[str, str], matchers: list[Matcher]) -> bool:
    """Whether a series with `labels` is one the matchers select (a missing label is "")."""
    for label, op, value in matchers:
        have = labels.get(label, "")
        hit = re.fullmatch(value, have) is not None if op in ("=~", "!~") else have == value
        if hit == (op in ("!=", "!~")):
            return False
    return True


def samples(body: str) -> list[tuple[str, dict[str, str], float]]:
    """The wakeful_ samples of a /metrics body: (name, labels, value)."""
    return [(name, dict(LABEL.findall(inside)), float(value)) for name, inside, value in SAMPLE.findall(body)]


def anchor(heading: str) -> str:
    """A Markdown heading's anchor as GitHub makes it."""
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", heading.strip().lower()))


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """promtool run with `args`; the test fails, naming the command that installs it, when it is not
    on the PATH (a missing tool is never a skip)."""
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(f"promtool is not installed: run `{SETUP}` (it installs Debian's prometheus package)")
    return subprocess.run([found, *args], capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)
