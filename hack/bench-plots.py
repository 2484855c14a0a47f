#!/usr/bin/env python3
"""Render the benchmark plots of docs/benchmarks.md from the results files the bench writes.

Usage: hack/bench-plots.py DIR   (`make bench-plots`; DIR is docs/bench)

Reads every DIR/*.json written by `capkk-bench` (target/bench/{ssh,claim,provision}-results.json, copied into
DIR under a name that says when and what) and writes into DIR:

  ssh-wall.png      wall time vs hosts per method (median of the timed runs), and each method / the local floor
  latency.png       claim and provisioning latency percentiles (p50, p90, max) vs machines

Where two files measured the same point (method and hosts, or bench and machines), the later one wins. Each
plot says the load range of the runs it shows: this machine is shared, so absolute times are noisy and ratios
from one run are the meaningful part.
"""

import json
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (the backend must be chosen first)
from matplotlib.ticker import NullFormatter, ScalarFormatter  # noqa: E402

METHODS = [
    ("ours", "capkk-rs"),
    ("capkk-v3", "CAPKK v3"),
    ("ansible", "ansible-core"),
    ("openssh", "OpenSSH ControlMaster"),
    ("local", "local (no SSH, floor)"),
]
# PNG metadata would otherwise carry matplotlib's version: the committed images change only with the data.
SAVE = {"dpi": 110, "metadata": {"Software": None}, "bbox_inches": "tight"}


def load(directory):
    docs = []
    for path in sorted(Path(directory).glob("*.json")):
        doc = json.loads(path.read_text())
        meta = doc.get("meta")
        if not isinstance(meta, dict) or "bench" not in meta:
            raise SystemExit(f"{path}: not a capkk-bench results file (no meta.bench)")
        doc["_path"] = path.name
        docs.append(doc)
    docs.sort(key=lambda d: d["meta"]["started_epoch_s"])
    return docs


def loads(docs):
    first = [d["meta"]["load_start"].split()[0] for d in docs]
    last = [d["meta"]["load_end"].split()[0] for d in docs]
    values = [float(x) for x in first + last]
    return f"load average (1 min) {min(values):.1f}-{max(values):.1f}" if values else ""


def ssh_plot(docs, out):
    points = {}  # (method, hosts) -> median wall, from the latest file measuring it
    used = []
    for doc in docs:
        walls = {}
        for run in doc["runs"]:
            walls.setdefault((run["method"], run["hosts"]), []).append(run["wall_s"])
        for key, values in walls.items():
            points[key] = statistics.median(values)
        used.append(doc)
    if not points:
        return False
    fig, (ax, rx) = plt.subplots(1, 2, figsize=(11, 4.2))
    for method, label in METHODS:
        xs = sorted(n for m, n in points if m == method)
        if not xs:
            continue
        ax.plot(xs, [points[(method, n)] for n in xs], marker="o", label=label)
        floor = [n for n in xs if ("local", n) in points]
        if floor and method != "local":
            rx.plot(floor, [points[(method, n)] / points[("local", n)] for n in floor], marker="o", label=label)
    ax.set_xlabel("hosts (N)")
    ax.set_ylabel("wall time, s (median of the runs)")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_title("Provisioning N sandbox hosts")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    rx.set_xlabel("hosts (N)")
    rx.set_ylabel("wall time / local floor")
    rx.axhline(1.0, color="grey", lw=0.8)
    rx.set_title("Relative to the no-SSH floor")
    rx.set_ylim(bottom=0)
    rx.grid(True, alpha=0.3)
    rx.legend(fontsize=8)
    fig.suptitle(f"capkk-bench ssh; {loads(used)}; files: {', '.join(d['_path'] for d in used)}", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "ssh-wall.png", **SAVE)
    plt.close(fig)
    return True


def percentiles(docs, key):
    points = {}  # machines -> distribution, from the latest file
    for doc in docs:
        points[doc["machines"]] = doc["latency_s"][key]
    return points


def latency_panel(ax, points, title):
    xs = sorted(points)
    for q, style in (("p50", "o-"), ("p90", "s-"), ("max", "^--")):
        ys = [points[n][q] for n in xs]
        ax.plot(xs, ys, style, label=q)
    ax.set_xlabel("machines")
    ax.set_ylabel("seconds")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)


def latency_plot(docs, out):
    claim = [d for d in docs if d["meta"]["bench"] == "claim"]
    provision = [d for d in docs if d["meta"]["bench"] == "provision"]
    panels = []
    if claim:
        panels.append((percentiles(claim, "data_to_claimed"), "bootstrap data → claimed (bench-controller)"))
    if provision:
        panels.append(
            (
                percentiles(provision, "data_to_provisioned_minus_host_work"),
                "bootstrap data → provisioned minus host work (bench-provision)",
            )
        )
        panels.append((percentiles(provision, "host_work"), "host work: the hosts' own command time"))
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4))
    for ax, (points, title) in zip(axes if len(panels) > 1 else [axes], panels):
        latency_panel(ax, points, title)
    used = claim + provision
    fig.suptitle(f"Manager latency per machine; {loads(used)}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "latency.png", **SAVE)
    plt.close(fig)
    return True


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out = Path(sys.argv[1])
    docs = load(out)
    made = []
    if ssh_plot([d for d in docs if d["meta"]["bench"] == "ssh"], out):
        made.append("ssh-wall.png")
    if latency_plot(docs, out):
        made.append("latency.png")
    if not made:
        raise SystemExit(f"{out}: no results files to plot")
    print(f"bench-plots: {', '.join(str(out / m) for m in made)} from {len(docs)} results files")


if __name__ == "__main__":
    main()
