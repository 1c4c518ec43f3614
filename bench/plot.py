"""`wakeful bench --plot FILE.png`: tasks/s over the run and the wake-to-effect latency
distribution, so a regression shows at a glance. matplotlib is an optional extra (`plot`)."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path

from wakeful.core.errors import ConfigError

BIN_S = 1.0  # seconds per point of the throughput line


def require() -> None:
    """Refuse before a run starts, not after it, when the plot cannot be drawn."""
    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError(
            "--plot", "needs matplotlib: pip install 'wakeful[plot]' (or pip install matplotlib)"
        )


def throughput(done_at: Sequence[float], started: float, bin_s: float = BIN_S) -> list[tuple[float, float]]:
    """(seconds since start, tasks finished per second in that bin) for every bin up to the last
    effect; empty bins are zeros, so a stall shows as a dip, not as a line drawn across it."""
    if not done_at:
        return []
    bins = [0] * (int(max(0.0, max(done_at) - started) // bin_s) + 1)
    for at in done_at:
        bins[int(max(0.0, at - started) // bin_s)] += 1
    return [(i * bin_s, n / bin_s) for i, n in enumerate(bins)]


def draw(
    path: Path,
    done_at: Sequence[float],
    started: float,
    latencies_ms: Sequence[float],
    title: str,
    *,
    marks: Mapping[str, float],
) -> Path:
    """marks: the percentiles the bench printed ({"p50": ms, ...}), drawn as they were printed."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    series = throughput(done_at, started)
    fig, (rate, lat) = plt.subplots(1, 2, figsize=(12, 4.5))
    rate.plot([t for t, _ in series], [n for _, n in series], drawstyle="steps-post")
    rate.set(xlabel="seconds since the first task was sent", ylabel="tasks/s finished", title="throughput")
    rate.grid(alpha=0.3)
    if latencies_ms:
        lat.hist(list(latencies_ms), bins=50)
        for (name, at), style in zip(marks.items(), ("-", "--", ":", "-."), strict=False):
            lat.axvline(at, color="black", linestyle=style, label=f"{name} {at:.0f} ms")
        lat.legend()
    lat.set(xlabel="wake-to-effect latency (ms)", ylabel="tasks", title="latency")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
