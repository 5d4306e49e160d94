#!/usr/bin/env python3
"""Draw the soak's samples (bench/run --only soak) as one PNG: resident memory, open files,
database bytes per task and submit p99 over time, with the windows the goal compares shaded.

    bench/soak-plot.py [RESULTS.json] [OUT.png]    (default: bench/results.json, docs/soak.png)

Needs matplotlib; without it, it installs matplotlib from PyPI into target/plot-venv and runs
itself there.
"""
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(here)

try:
    import matplotlib
except ImportError:
    venv = os.path.join(repo, "target", "plot-venv")
    python = os.path.join(venv, "bin", "python")
    if sys.executable == python:
        sys.exit("soak-plot: matplotlib did not install into " + venv)
    if not os.path.exists(python):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", "matplotlib"], check=True)
    os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

results_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "results.json")
out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(repo, "docs", "soak.png")
with open(results_path) as f:
    results = json.load(f)
soak = results["details"].get("soak")
if not soak:
    sys.exit(f"soak-plot: {results_path} holds no soak run")
samples = soak["samples"]
minutes = [s["secs"] / 60 for s in samples]
total = soak["minutes"]
span = total / 15

panels = [
    ("resident memory (MiB)", [s["rss_mib"] for s in samples]),
    ("open files", [s["open_files"] for s in samples]),
    ("database bytes per task", [s["db_bytes_per_task"] for s in samples]),
    ("submit latency, ms (p50 and p99 per 10 s)", [s["submit_p99_ms"] for s in samples]),
]
fig, axes = plt.subplots(len(panels), 1, figsize=(8, 10), sharex=True)
for ax, (title, values) in zip(axes, panels):
    ax.plot(minutes, values, lw=1.2, label="p99" if "latency" in title else None)
    if "latency" in title:
        ax.plot(minutes, [s["submit_p50_ms"] for s in samples], lw=1.0, label="p50")
        ax.legend(loc="upper right", fontsize=8)
    ax.axvspan(total / 3, total / 3 + span, color="0.85")
    ax.axvspan(total - span, total, color="0.85")
    ax.set_title(title, fontsize=10, loc="left")
    ax.set_ylim(bottom=0)
    ax.grid(True, lw=0.3)
axes[-1].set_xlabel("minutes")
machine = results.get("machine", {})
fig.suptitle(
    f"easel soak, {results.get('date', '?')} at {results.get('revision', '?')}: "
    f"{soak['submits_per_sec']:g} submits/s, {soak['fetches_per_sec']:g} fetches/s, "
    f"{soak['streams']} streams\n{machine.get('cpu', '?')}, {machine.get('cores', '?')} cores; "
    "shaded: the windows compared",
    fontsize=9,
)
fig.tight_layout()
fig.savefig(out, dpi=90)
print(f"wrote {out}")
