#!/usr/bin/python3
"""Plots for docs/PERFORMANCE.md from the benchmarks' JSON (Google Benchmark's format).

    bench/plot_offload.py --out docs/measurements/DATE-MACHINE  FILE.json [FILE.json ...]

Reads any mix of:
  offload_throughput_bench   save_restore/<backend>/session_mib:S/used_pct:U
  engine_offload_bench       snapshot_bytes/<backend>/<model>/tokens:N
and writes, for each backend found:
  throughput-<backend>.png       save and restore GB/s against session size (fully used
                                 sessions), each with its baseline measured in the same run
  sparse-<backend>.png           snapshot bytes against the used fraction (synthetic sessions)
  snapshot-bytes-<backend>.png   snapshot bytes against tokens of history (the engine)
Needs matplotlib for the interpreter that runs it (Debian: apt-get install python3-matplotlib,
then run it with /usr/bin/python3, as the first line does); nothing else.
"""
import argparse
import json
import os
import sys


def counters_by_name(paths):
    """{benchmark name without the /iterations:.. suffix: its entry}, over every file."""
    out = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        for entry in data.get("benchmarks", []):
            if entry.get("error_occurred"):
                print(f"plot_offload: skipping {entry['name']}: {entry.get('error_message')}",
                      file=sys.stderr)
                continue
            name = entry["name"].split("/iterations:")[0].replace("/manual_time", "")
            out[name] = entry
    return out


def parse(name):
    """'save_restore/sim/session_mib:64/used_pct:10' -> ('save_restore', 'sim', {...})."""
    parts = name.split("/")
    params = {}
    plain = []
    for part in parts[1:]:
        if ":" in part and part.split(":")[0] in ("session_mib", "used_pct", "tokens", "history"):
            key, value = part.split(":", 1)
            params[key] = float(value)
        else:
            plain.append(part)
    return parts[0], plain, params


def save(plt, fig, out_dir, name):
    """Grids and legends on every axis, then the PNG; returns its path."""
    for axis in fig.axes:
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_throughput(plt, entries, backend, out_dir):
    rows = sorted((p["session_mib"], e) for kind, plain, p, e in entries
                  if kind == "save_restore" and plain[0] == backend and p.get("used_pct") == 100)
    if not rows:
        return None
    sizes = [mib for mib, _ in rows]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=False)
    for axis, phase in zip(axes, ("save", "restore")):
        axis.plot(sizes, [e[f"{phase}_gb_s"] for _, e in rows], "o-", label=f"{phase} (siesta)")
        axis.plot(sizes, [e[f"{phase}_baseline_gb_s"] for _, e in rows], "s--",
                  label="baseline: " + ("copy out + write + fdatasync" if phase == "save"
                                        else "read + copy in"))
        if phase == "restore" and "restore_fresh_baseline_gb_s" in rows[0][1]:
            axis.plot(sizes, [e["restore_fresh_baseline_gb_s"] for _, e in rows], "^:",
                      label="baseline with fresh memory (commit + read + copy in)")
        axis.set_xscale("log", base=2)
        axis.set_xticks(sizes)
        axis.set_xticklabels([f"{int(s)} MiB" if s < 1024 else f"{s / 1024:g} GiB" for s in sizes])
        axis.set_xlabel("session size (fully used)")
        axis.set_ylabel("GB/s of payload")
        axis.set_ylim(bottom=0)
        axis.set_title(f"{phase}, {backend}")
    return save(plt, fig, out_dir, f"throughput-{backend}.png")


def plot_sparse(plt, entries, backend, out_dir):
    by_size = {}
    for kind, plain, p, e in entries:
        if kind == "save_restore" and plain[0] == backend:
            by_size.setdefault(p["session_mib"], []).append((p["used_pct"], e["snapshot_bytes"]))
    if not by_size:
        return None
    fig, axis = plt.subplots(figsize=(6, 4.2))
    for mib, points in sorted(by_size.items()):
        points.sort()
        axis.plot([u for u, _ in points], [b / 2**20 for _, b in points], "o-",
                  label=f"{int(mib)} MiB session")
    axis.set_xlabel("used fraction of the session (%)")
    axis.set_ylabel("snapshot MiB")
    axis.set_yscale("log")
    axis.set_title(f"sparse snapshots, {backend}: bytes follow use, not capacity")
    return save(plt, fig, out_dir, f"sparse-{backend}.png")


def plot_snapshot_bytes(plt, entries, backend, out_dir):
    by_model = {}
    for kind, plain, p, e in entries:
        if kind == "snapshot_bytes" and plain[0] == backend:
            by_model.setdefault(plain[1], []).append(
                (p["tokens"], e["snapshot_bytes"], e.get("session_bytes", 0)))
    if not by_model:
        return None
    fig, axis = plt.subplots(figsize=(6, 4.2))
    for model, points in sorted(by_model.items()):
        points.sort()
        line, = axis.plot([t for t, _, _ in points], [b / 2**20 for _, b, _ in points], "o-",
                          label=f"{model}: snapshot")
        session = max(s for _, _, s in points)
        if session:
            axis.axhline(session / 2**20, color=line.get_color(), linestyle="--",
                         label=f"{model}: session memory released")
    axis.set_xlabel("tokens of history")
    axis.set_ylabel("MiB")
    axis.set_title(f"snapshot size against tokens used, {backend}")
    return save(plt, fig, out_dir, f"snapshot-bytes-{backend}.png")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for the PNG files")
    parser.add_argument("json", nargs="+", help="Google Benchmark JSON files")
    args = parser.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_offload: needs matplotlib (Debian: apt-get install python3-matplotlib)")
    entries = [(*parse(name), entry) for name, entry in counters_by_name(args.json).items()]
    backends = sorted({plain[0] for kind, plain, _, _ in entries if plain})
    os.makedirs(args.out, exist_ok=True)
    written = []
    for backend in backends:
        for plot in (plot_throughput, plot_sparse, plot_snapshot_bytes):
            path = plot(plt, entries, backend, args.out)
            if path:
                written.append(path)
    if not written:
        sys.exit("plot_offload: nothing to plot in " + ", ".join(args.json))
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
