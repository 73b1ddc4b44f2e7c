"""``python -m benchmarks [name ...]``: run the benchmarks (all by default), each in its own
process (its own JVM with its own packages), then write ``results/summary.md`` and
``results/summary.png`` with every ratio of ours to Spark's own and, where the benchmark times one,
to the ceiling: the best any Python connector could do on the same data."""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import RESULTS

HERE = Path(__file__).parent


def benchmarks() -> dict[str, str]:
    """Every benchmark's name and the first sentence of its docstring, without importing it."""
    first = {}
    for path in sorted(HERE.glob("bench_*.py")):
        text = (ast.get_docstring(ast.parse(path.read_text())) or "").split("\n\n")[0]
        first[path.stem.removeprefix("bench_")] = " ".join(text.replace("``", "").split())
    return first


def main(argv: list[str]) -> int:
    available = benchmarks()
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Run benchmarks, ours side by side with Spark's own, each in its own process.\n"
        "Results and a summary of the ratios go to benchmarks/results/.",
        epilog="benchmarks:\n" + "\n".join(f"  {name:<14} {text}" for name, text in available.items())
        + "\n\nEach one also runs alone, with its own options: python -m benchmarks.bench_NAME --help",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("names", nargs="*", metavar="name", help="benchmarks to run (default: all)")
    names = parser.parse_args(argv).names or list(available)
    if unknown := [name for name in names if name not in available]:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)} (choose from {', '.join(available)})")
    failed, started = [], time.monotonic()
    for number, name in enumerate(names, 1):
        print(f"== benchmark {number}/{len(names)}: {name} ({elapsed(started)} elapsed)", flush=True)
        begun = time.monotonic()
        code = subprocess.call([sys.executable, "-m", f"benchmarks.bench_{name}"])
        print(f"== {name} {'failed' if code else 'done'} in {elapsed(begun)}", flush=True)
        if code != 0:
            failed.append(name)
    summarize()
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def elapsed(since: float) -> str:
    minutes, seconds = divmod(int(time.monotonic() - since), 60)
    return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"


def summarize() -> None:
    RESULTS.mkdir(exist_ok=True)  # absent when every benchmark failed before reporting
    rows = []
    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text())
        lower = data.get("lower_is_better", False)  # ratios of latencies, not of rows/s
        ceilings = data.get("to_ceiling", {})
        rows += [(data["benchmark"], label, value, ceilings.get(label), lower) for label, value in data["ratios"].items()]
    lines = ["| benchmark | ratio | ours / Spark's | ours / ceiling | better |", "|---|---|---|---|---|"]
    lines += [f"| {bench} | {label} | {value:.2f} | {'-' if ceiling is None else f'{ceiling:.2f}'} | "
              f"{'lower' if lower else 'higher'} |" for bench, label, value, ceiling, lower in rows]
    (RESULTS / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if rows:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 0.6 * len(rows) + 1.2))
        where = range(len(rows))
        ax.barh([y - 0.2 for y in where], [v for _, _, v, _, _ in rows], height=0.4,
                color=["#C44E52" if lower else "#55A868" for *_, lower in rows], label="ours / Spark's")
        ax.barh([y + 0.2 for y in where], [c or 0 for _, _, _, c, _ in rows], height=0.4, color="#4C72B0",
                label="ours / ceiling")
        ax.set_yticks(list(where), [f"{b}: {label}" for b, label, *_ in rows])
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.invert_yaxis()
        ax.set_xlabel("1 = parity with Spark's, or the ceiling reached\ngreen: higher is better, red: lower is better")
        ax.legend(loc="lower right")
        fig.tight_layout()
        fig.savefig(RESULTS / "summary.png", dpi=100)
        plt.close(fig)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
