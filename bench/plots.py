"""One PNG a workload (matplotlib, Agg backend), drawn from the same results document.

Left panel: throughput per system (horizontal bars, one colour per N; MB/s where the workload
measures bytes, W3 and W5F, else operations/s; a log axis when the systems span more than 30×).
Right panel, for workloads that measure it (W5, W5F, W6): the 1 ms ticker's p99 lateness per
system, log axis, with the 1 ms line of the loop-lag target (``bench.targets``). The title
names the workload, profile and date (the results JSON keeps the commit).
``python -m bench.plots results/*.json`` redraws saved results.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.common import JSONDict

COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")


def _series(doc: JSONDict, key: str) -> tuple[list[str], list[int], dict[tuple[str, int], float]]:
    have = {c["system"] for c in doc["cells"] if c.get(key) is not None}
    systems = [s for s in doc["systems"] if s in have]
    free = set(doc["concurrency_free"])
    values = {(c["system"], c["readers"]): c[key] for c in doc["cells"]
              if c.get(key) is not None}
    readers = doc["readers"] if doc.get("concurrency", True) else [1]
    table = {(s, n): values[(s, 1 if s in free else n)] for s in systems for n in readers
             if (s, 1 if s in free else n) in values}
    return systems, readers, table


def _bars(ax: Any, doc: JSONDict, key: str, scale: float, label: str) -> None:
    systems, readers, table = _series(doc, key)
    height = 0.8 / max(1, len(readers))
    for k, n in enumerate(readers):
        ys = [i + k * height for i, s in enumerate(systems) if (s, n) in table]
        xs = [table[(s, n)] * scale for s in systems if (s, n) in table]
        ax.barh(ys, xs, height=height, color=COLOURS[k % len(COLOURS)],
                label=f"N={n}" if len(readers) > 1 else None)
    ax.set_yticks([i + height * (len(readers) - 1) / 2 for i in range(len(systems))])
    ax.set_yticklabels(systems, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(label)
    values = [v for v in table.values() if v and v > 0]
    if values and max(values) / min(values) > 30:
        ax.set_xscale("log")
    ax.grid(axis="x", alpha=0.3, which="both")
    if len(readers) > 1:
        ax.legend(fontsize=7)


def draw(doc: JSONDict, out_dir: Path) -> str:
    """Draw ``<out_dir>/<workload>.png``; return a line for the progress log."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"{doc['workload']}: no plot (matplotlib not importable: {exc})"
    if not doc["cells"]:
        return f"{doc['workload']}: no plot (no cell measured)"
    lag = any(c.get("lag_p99_ms") is not None for c in doc["cells"])
    rows = len({c["system"] for c in doc["cells"]})
    fig, axes = plt.subplots(1, 2 if lag else 1, figsize=(12 if lag else 8, 1.2 + 0.32 * rows),
                             squeeze=False)
    if any("mb_per_s" in c for c in doc["cells"]):
        _bars(axes[0][0], doc, "mb_per_s", 1e-3, "GB/s (10⁹ bytes/s)")
    else:
        _bars(axes[0][0], doc, "ops_per_s", 1e-3, f"thousand {doc['unit']}/s")
    if lag:
        ax = axes[0][1]
        _bars(ax, doc, "lag_p99_ms", 1.0, "1 ms ticker: p99 lateness (ms)")
        ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
    fig.suptitle(f"{doc['workload']}: {doc['title']}\n{doc['profile']} profile · "
                 f"{doc['machine']['date']}", fontsize=9)
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{doc['workload'].lower()}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"{doc['workload']}: plot written to {path}"


def main(argv: list[str]) -> int:
    out = Path(__file__).resolve().parent.parent / "docs" / "img"
    for name in argv:
        print(draw(json.loads(Path(name).read_text()), out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
