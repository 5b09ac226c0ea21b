"""Verification by the block route (idlib.blockrank) at d = 256 and at GPT-2 small's layer shape.

    python benchmarks/verify_block.py                  (what `make bench` runs; ~30 min on 2 cores)
    python benchmarks/verify_block.py --only gpt2      (one run; the others are kept from the record)
    python benchmarks/verify_block.py --device cuda    (every run on the GPU, in float64; the
                                                       device is recorded with each run)

Runs ``python -m idlib verify LAYER --json`` with default flags (the route "auto" takes: the block
route) for each layer of ``RUNS`` -- d = 256, H = 16 plain and with 4 key/value groups, full RoPE
or all four biases, and d = 768, H = 12 (GPT-2 small's attention layer) -- one subprocess each, and
records the wall time, the child's own peak resident memory (``os.wait4``), the route, the measured
rank against the closed form, the certified gap, the verdict and the machine (with its load
average before and after: other jobs slow the runs) in benchmarks/results/verify_block.json;
the reproducibility page shows the table (``benchmarks/report.py``) and
benchmarks/results/route_curve.png: time and peak memory against P for every route -- the
straightforward Jacobian + SVD and the structured route from rank_speed.json (``rank_speed.py``),
the block route from the plain layers here (d = 64, 128, 256 and GPT-2 small's 768).
``--figure`` redraws the figure from the records without running anything.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from environment import environment, run_verify  # noqa: E402

# name -> (flags, targets: wall seconds, peak resident GB)
RUNS = {
    "d64": (("--d-model", "64", "--heads", "8"), 120.0, 4.0),
    "d128": (("--d-model", "128", "--heads", "16"), 120.0, 4.0),
    "d256": (("--d-model", "256", "--heads", "16"), 120.0, 4.0),
    "d256-gqa": (("--d-model", "256", "--heads", "16", "--kv-heads", "4"), 600.0, 16.0),
    "d256-rope": (("--d-model", "256", "--heads", "16", "--rope-fraction", "1"), 600.0, 16.0),
    "d256-bias": (("--d-model", "256", "--heads", "16", "--bias", "qkvo"), 600.0, 16.0),
    "gpt2": (("--d-model", "768", "--heads", "12"), 1800.0, 16.0),
}
LABELS = {"d64": "d = 64, H = 8", "d128": "d = 128, H = 16", "d256": "d = 256, H = 16", "d256-gqa": "d = 256, H = 16, 4 key/value groups",
          "d256-rope": "d = 256, H = 16, full RoPE", "d256-bias": "d = 256, H = 16, biases q, k, v, o",
          "gpt2": "d = 768, H = 12 (GPT-2 small)"}


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def verify(name: str, device: str = "cpu") -> dict:
    """One ``idlib verify --json`` run: its report, wall seconds and peak RSS (GB) of that child."""
    flags, seconds_max, memory_max = RUNS[name]
    before = load_average()
    report, seconds, usage = run_verify([*flags, "--device", device])
    num = report["numerical"]
    row = {"name": name, "label": LABELS[name], "device": device,
           "command": " ".join(["python", "-m", "idlib", "verify", *flags]),
           "seconds": seconds, "cpu_seconds": usage.ru_utime + usage.ru_stime,
           "max_rss_gb": usage.ru_maxrss / 1e6, "load_average_before": before,
           "load_average_after": load_average(), "method": num["method"],
           "n_params": num["n_params"], "n_rows": num["n_rows"], "rank": num["rank"],
           "closed_form_identified": report["identified"], "unidentified": report["unidentified"],
           "gap": num["gap"], "certified": num["certified"], "agrees": report["agrees"],
           "exit_code": report["exit_code"], "seconds_max": seconds_max, "memory_gb_max": memory_max}
    row["met"] = bool(row["agrees"] and seconds <= seconds_max and row["max_rss_gb"] <= memory_max)
    return row


PLAIN = ("d64", "d128", "d256", "gpt2")      # the block route's points of the curve


def figure(runs: list[dict], out: Path) -> None:
    """route_curve.png: seconds and peak resident GB against P (log-log), one line per route."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    speed = json.loads((out.parent / "rank_speed.json").read_text()).get("curve", []) \
        if (out.parent / "rank_speed.json").exists() else []
    routes = [("straightforward (Jacobian + SVD)", "#d99a00", "o",
               [p for p in speed if p["route"] == "straightforward"]),
              ("structured (idlib.fastrank)", "#c0504d", "s",
               [p for p in speed if p["route"] == "idlib"]),
              ("block (idlib.blockrank)", "#1f5f9e", "D",
               [r for r in runs if r["name"] in PLAIN and r["method"] == "block"])]
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.8))
    for ax, key, label in ((axes[0], "seconds", "wall seconds"),
                           (axes[1], "max_rss_gb", "peak resident memory (GB)")):
        for name, color, marker, pts in routes:
            pts = sorted(pts, key=lambda p: p["n_params"])
            if pts:
                ax.loglog([p["n_params"] for p in pts], [p[key] for p in pts], marker=marker,
                          color=color, label=name)
        ax.set_xlabel("parameters $P$")
        ax.set_ylabel(label)
        ax.grid(True, which="major", alpha=0.3)
    axes[0].axhline(1800, color="grey", ls="--", lw=1)
    axes[0].text(1.1e3, 1800 / 1.3, "target: 30 min", color="grey", fontsize=9, va="top")
    axes[1].axhline(16, color="grey", ls="--", lw=1)
    axes[1].text(1.1e3, 16 / 1.15, "target: 16 GB", color="grey", fontsize=9, va="top")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=9,
               bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(out.parent / "route_curve.png", dpi=120, bbox_inches="tight",
                metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "results" / "verify_block.json"))
    ap.add_argument("--only", nargs="*", choices=list(RUNS), default=None,
                    help="run these only; the record's other runs are kept")
    ap.add_argument("--figure", action="store_true", help="only redraw route_curve.png")
    ap.add_argument("--device", default="cpu", help="where idlib verify measures (cpu, cuda, ...)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.figure:
        figure(json.loads(out.read_text())["runs"], out)
        return 0
    kept = {}
    if args.only is not None and out.exists():
        kept = {r["name"]: r for r in json.loads(out.read_text())["runs"]}
    for name in (args.only if args.only is not None else RUNS):
        print(f"python -m idlib verify {' '.join(RUNS[name][0])} ...", flush=True)
        r = verify(name, args.device)
        r["environment"] = environment()
        kept[name] = r
        print(f"  {r['seconds']:.0f} s ({r['cpu_seconds']:.0f} s of CPU), {r['max_rss_gb']:.2f} GB, "
              f"{r['method']} route, rank {r['rank']:,} of {r['n_params']:,} (closed form "
              f"{r['closed_form_identified']:,}), gap {r['gap']:.2e}, agrees {r['agrees']}, targets "
              f"met {r['met']} (load {r['load_average_before']} -> {r['load_average_after']})",
              flush=True)
    rows = [kept[name] for name in RUNS if name in kept]
    result = {"script": "benchmarks/verify_block.py", "runs": rows,
              "met": all(r["met"] for r in rows)}
    out.write_text(json.dumps(result, indent=2) + "\n")
    figure(rows, out)
    print(f"wrote {out} and route_curve.png; targets met: {result['met']}", flush=True)
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
