"""PNG plots of a report, when matplotlib is installed (requirements-dev.txt); else none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inference.request import Tier

PANELS = [  # (title, path into a summary)
    ("hot attainment", (Tier.HOT, "attainment")),
    ("warm attainment (windows)", (Tier.WARM, "attainment")),
    ("cold jobs on time", (Tier.COLD, "attainment")),
    ("hot P99 TTFT (s)", (Tier.HOT, "ttft_p99_s")),
    ("hot P99 TBT (s)", (Tier.HOT, "tbt_p99_s")),
    ("KV fragmentation", ("kv_fragmentation",)),
]


def _value(summary: dict, path: tuple[str, ...]) -> float:
    v: Any = summary
    for k in path:
        v = v[k]
    return float(v)


def write_plots(out_dir: Path, summaries: dict[str, dict], title: str,
                goodput: dict[str, list] | None = None) -> list[Path]:
    """Bar charts, one panel per metric and one bar per policy; the goodput probes if given.
    Returns the files written (none without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    names = list(summaries)
    fig, axes = plt.subplots(2, 3, figsize=(12, 6.5))
    for ax, (label, path) in zip(axes.flat, PANELS):
        ax.bar(names, [_value(summaries[n], path) for n in names], color="#4477aa")
        ax.set_title(label, fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    files = [out_dir / "metrics.png"]
    fig.savefig(files[0], dpi=100)
    plt.close(fig)
    if goodput:
        fig, ax = plt.subplots(figsize=(6, 4))
        for i, (name, probes) in enumerate(goodput.items()):
            ax.scatter([p[0] for p in probes], [i] * len(probes),
                       c=["#228833" if p[1] else "#cc3311" for p in probes])
        ax.set_yticks(range(len(goodput)), list(goodput))
        ax.set_xlabel("load multiplier (green: targets met)")
        ax.set_title(f"goodput bisection - {title}", fontsize=10)
        fig.tight_layout()
        files.append(out_dir / "goodput.png")
        fig.savefig(files[-1], dpi=100)
        plt.close(fig)
    return files
