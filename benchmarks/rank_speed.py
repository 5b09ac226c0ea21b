"""Benchmark of the Jacobian-rank measurement: the straightforward route against idlib's.

    python benchmarks/rank_speed.py            (what `make bench` runs; a few minutes on 2 cores)

1. d_model = 32, H = 4 (4,096 parameters), in one process, each route after a warm-up on a
   tiny layer (so neither pays one-off lazy imports):
   * straightforward: ``torch.autograd.functional.jacobian`` of the flattened layer over all
     parameters, then ``torch.linalg.matrix_rank``;
   * idlib: ``idlib.rank.measure(config)`` (method "auto", i.e. the structured route).
   Same parameters and inputs (idlib's seeded defaults).  The straightforward route's gap is
   computed afterwards from the singular values ``matrix_rank`` thresholds (not timed).
2. d_model = 64, H = 8 (16,384 parameters): ``python -m idlib verify --d-model 64 --heads 8
   --json`` as a subprocess: wall time and peak resident memory (getrusage of the child).

Writes benchmarks/results/rank_speed.json and two figures, rank_speed.png (times) and
rank_certificate.png (J's singular values at 4,096 parameters with idlib's two bounds).
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from environment import ROOT, environment  # noqa: E402

from idlib.attention import flatten, forward, init_params, random_inputs, unflatten  # noqa: E402
from idlib.config import AttentionConfig  # noqa: E402
from idlib.counting import count  # noqa: E402
from idlib.rank import (CERTIFY_GAP, default_n_sequences, default_seq_len, measure,  # noqa: E402
                        rank_from_singular_values)

TARGETS = {"speedup_min": 4.0, "large_seconds_max": 180.0, "large_memory_gb_max": 16.0}


def inputs(config: AttentionConfig, seed: int = 0):
    n = default_seq_len(config)
    X = random_inputs(config, default_n_sequences(config, n), n, seed)
    return init_params(config, seed), X


def straightforward(config: AttentionConfig, seed: int = 0) -> dict:
    params, X = inputs(config, seed)
    theta = flatten(params)

    def f(t: torch.Tensor) -> torch.Tensor:
        return forward(config, unflatten(config, t), X).reshape(-1)

    t0 = time.perf_counter()
    J = torch.autograd.functional.jacobian(f, theta)
    t1 = time.perf_counter()
    rank = int(torch.linalg.matrix_rank(J))
    t2 = time.perf_counter()
    return {"jacobian_seconds": t1 - t0, "rank_seconds": t2 - t1, "seconds": t2 - t0,
            "rank": rank, "J": J}


def idlib_route(config: AttentionConfig, seed: int = 0) -> dict:
    t0 = time.perf_counter()
    m = measure(config, seed=seed)
    return {"seconds": time.perf_counter() - t0, "rank": m.rank, "gap": _finite(m.gap),
            "certified": bool(m.certified), "method": m.method,
            "sigma_r_lower": m.singular_values[0].item() if m.method == "structured" else None,
            "sigma_next_upper": m.singular_values[1].item()
            if m.method == "structured" and m.singular_values.numel() > 1 else None}


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def large_run(d_model: int, heads: int) -> dict:
    base = [sys.executable, "-m", "idlib", "verify", "--d-model", str(d_model), "--heads", str(heads),
            "--json"]
    note = None
    for cmd in (base, base + ["--max-params", str(d_model * d_model * 4)]):
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        rss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        if proc.returncode == 2 and "max-params" in proc.stderr and cmd is base:
            note = ("The command line refused the layer under its default `--max-params`; the run "
                    "shown adds `--max-params " + str(d_model * d_model * 4) + "`.")
            continue
        break
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    report = json.loads(proc.stdout)
    num = report["numerical"]
    shown = " ".join(["python", "-m"] + cmd[2:])
    return {"command": shown, "seconds": seconds, "max_rss_gb": max(rss_kb, before) / 1e6,
            "n_params": num["n_params"], "n_rows": num["n_rows"], "rank": num["rank"],
            "gap": num["gap"], "certified": num["certified"], "agrees": report["agrees"],
            "closed_form_identified": report["identified"], "exit_code": proc.returncode,
            "note": note}


def figures(result: dict, sv: torch.Tensor, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from idlib.report.plotting import COLORS, style

    style()
    s, L, t = result["small"], result["large"], result["targets"]
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.4))
    ax = axes[0]
    sf = s["straightforward"]
    ax.barh([1], [sf["jacobian_seconds"]], color=COLORS["baseline"], label="Jacobian")
    ax.barh([1], [sf["rank_seconds"]], left=[sf["jacobian_seconds"]], color=COLORS["unidentified"],
            label="matrix_rank (SVD)")
    ax.barh([0], [s["idlib"]["seconds"]], color=COLORS["measured"], label="idlib measure()")
    ax.set_yticks([0, 1], ["idlib", "straightforward"])
    ax.set_xlabel("seconds")
    ax.set_title(f"{s['n_params']:,} parameters: {s['speedup']:.1f}x faster")
    ax.legend(loc="lower right", fontsize=8)
    ax = axes[1]
    ax.barh([0], [L["seconds"]], color=COLORS["measured"])
    ax.axvline(t["large_seconds_max"], color=COLORS["closed_form"], ls="--", lw=1,
               label=f"target {t['large_seconds_max']:g} s")
    ax.set_yticks([0], ["idlib verify"])
    ax.set_xlabel("seconds")
    ax.set_title(f"{L['n_params']:,} parameters ({L['max_rss_gb']:.1f} GB peak)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "rank_speed.png", dpi=120, metadata={"Software": None})
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.4, 4.3))
    sv = sv.sort(descending=True).values
    rel = (sv / sv[0]).clamp_min(1e-18)
    ax.semilogy(range(1, len(rel) + 1), rel.numpy(), ".", ms=2, color=COLORS["measured"],
                label=r"$\sigma_i(J)$, dense SVD")
    r = s["idlib"]["rank"]
    lo, hi = s["idlib"]["sigma_r_lower"], s["idlib"]["sigma_next_upper"]
    if lo is not None and hi is not None:
        ax.axhline(lo / sv[0].item(), color=COLORS["closed_form"], lw=1,
                   label=r"idlib: lower bound on $\sigma_r$")
        ax.axhline(hi / sv[0].item(), color=COLORS["closed_form"], lw=1, ls="--",
                   label=r"idlib: upper bound on $\sigma_{r+1}$")
        gap = s["idlib"]["gap"]
        if gap and lo / gap > hi * (1 + 1e-9):     # the gap divides by tau' (round-off) instead
            ax.axhline(lo / gap / sv[0].item(), color=COLORS["closed_form"], lw=1, ls="-.",
                       label=r"idlib: upper bound on $\tau$ (the gap's denominator)")
    ax.axvline(r + 0.5, color=COLORS["unidentified"], lw=0.8, ls=":")
    ax.set_xlabel("index $i$")
    ax.set_ylabel(r"$\sigma_i / \sigma_1$")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(out / "rank_certificate.png", dpi=120, metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--small", default="32,4", help="d_model,heads of the side-by-side run")
    ap.add_argument("--large", default="64,8", help="d_model,heads of the verify run")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment()

    d, h = (int(x) for x in args.small.split(","))
    config = AttentionConfig(d, h)
    tiny = AttentionConfig(8, 2)
    print("warm-up on d_model=8, H=2", flush=True)
    straightforward(tiny)
    measure(tiny, method="structured")
    measure(tiny, method="dense")
    print(f"side by side at d_model={d}, H={h} ...", flush=True)
    sf = straightforward(config)
    J = sf.pop("J")
    sv = torch.linalg.svdvals(J)                       # for the gap and the figure, not timed
    shape = tuple(J.shape)
    del J                                              # idlib runs without the 0.25 GB J around
    gc.collect()
    fast = idlib_route(config)
    r_sv, gap_sv = rank_from_singular_values(sv, shape)
    sf["gap"], sf["certified"] = _finite(gap_sv), bool(gap_sv >= CERTIFY_GAP)
    assert r_sv == sf["rank"], (r_sv, sf["rank"])
    small = {"label": f"d_model = {d}, H = {h}", "config": config.to_dict(),
             "n_params": shape[1], "n_rows": shape[0], "straightforward": sf, "idlib": fast,
             "speedup": sf["seconds"] / fast["seconds"], "same_rank": sf["rank"] == fast["rank"],
             "closed_form_identified": count(config).identified}
    print(f"  straightforward {sf['seconds']:.1f} s (rank {sf['rank']}), idlib {fast['seconds']:.1f} s "
          f"(rank {fast['rank']}, gap {fast['gap']:.2e}, {fast['method']}): {small['speedup']:.1f}x",
          flush=True)

    d2, h2 = (int(x) for x in args.large.split(","))
    print(f"python -m idlib verify --d-model {d2} --heads {h2} ...", flush=True)
    large = large_run(d2, h2)
    print(f"  {large['seconds']:.1f} s, {large['max_rss_gb']:.2f} GB, rank {large['rank']}, "
          f"gap {large['gap'] if large['gap'] is None else format(large['gap'], '.2e')}, "
          f"certified {large['certified']}", flush=True)

    result = {"script": "benchmarks/rank_speed.py", "environment": env, "targets": TARGETS,
              "small": small, "large": large,
              "met": {"speedup": small["speedup"] >= TARGETS["speedup_min"] and small["same_rank"]
                      and fast["certified"],
                      "large": large["seconds"] <= TARGETS["large_seconds_max"]
                      and large["max_rss_gb"] <= TARGETS["large_memory_gb_max"] and large["certified"]}}
    (out / "rank_speed.json").write_text(json.dumps(result, indent=2) + "\n")
    figures(result, sv, out)
    print(f"wrote {out / 'rank_speed.json'}, rank_speed.png, rank_certificate.png; targets met: "
          f"{result['met']}", flush=True)
    return 0 if all(result["met"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
