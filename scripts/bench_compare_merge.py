#!/usr/bin/env python3
"""Merges the rounds scripts/bench-compare left in DIR into DIR/base.json and DIR/new.json.

Each round's run of a benchmark becomes one repetition of it (compare.py pairs the rounds and
its U test takes them as repetitions), and every figure counter it reports (a name ending in
_ms, _s or _ratio: a time, a rate, a ratio) becomes a benchmark row of its own,
"<benchmark>/<counter>", whose time is the counter's value, so that compare.py compares it like
any time. Also prints, and writes to DIR/ratios.txt, each row's median on both sides and their
ratio (new / base), the figure a note quotes. Usage: bench_compare_merge.py DIR
"""
import glob
import json
import os
import re
import statistics
import sys

FIGURE = re.compile(r"(_ms|_s|_ratio|^ratio)$")


def rows(benchmark):
    """The benchmark's own row, then one row per figure counter."""
    yield benchmark
    for key, value in benchmark.items():
        if not isinstance(value, (int, float)) or not FIGURE.search(key):
            continue
        row = {k: benchmark[k] for k in ("run_type", "repetitions", "threads", "iterations")
               if k in benchmark}
        row["name"] = row["run_name"] = benchmark["name"] + "/" + key
        row["real_time"] = row["cpu_time"] = float(value)
        row["time_unit"] = "ms"
        yield row


def merge(directory, side):
    merged = None
    for path in sorted(glob.glob(os.path.join(directory, side + "-*.json"))):
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
        if merged is None:
            merged = {"context": run.get("context", {}), "benchmarks": []}
        for benchmark in run.get("benchmarks", []):
            if benchmark.get("run_type", "iteration") != "iteration":
                continue  # aggregates: compare.py makes its own
            merged["benchmarks"].extend(rows(benchmark))
    if merged is None:
        sys.exit(f"bench_compare_merge: no {side}-*.json in {directory}")
    with open(os.path.join(directory, side + ".json"), "w", encoding="utf-8") as f:
        json.dump(merged, f, indent=1)
    values = {}
    for row in merged["benchmarks"]:
        values.setdefault(row["name"], []).append(row["real_time"])
    return values


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    base, new = (merge(sys.argv[1], side) for side in ("base", "new"))
    lines = [f"{'row':<90} {'base':>12} {'new':>12} {'new/base':>9}   (medians over rounds)"]
    for name in base:
        if name not in new:
            continue
        b, n = statistics.median(base[name]), statistics.median(new[name])
        ratio = f"{n / b:9.3f}" if b else f"{'-':>9}"
        lines.append(f"{name:<90} {b:12.4g} {n:12.4g} {ratio}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    with open(os.path.join(sys.argv[1], "ratios.txt"), "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
