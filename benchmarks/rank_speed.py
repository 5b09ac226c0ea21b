"""Benchmark of the Jacobian-rank measurement: the straightforward route against idlib's, as a curve.

    python benchmarks/rank_speed.py            (what `make bench` runs after verify_large.py;
                                               ~10 minutes on 2 quiet cores)

1. Throughput of this machine in float64: a 2,000 x 2,000 GEMM and the singular values of a
   3,000 x 2,000 matrix (GFLOP/s, best of three); they draw the limit lines of the figure.
2. The curve: layers of P = 4 d^2 parameters from 1,024 up (``SIZES``), each route in its own
   subprocess after a warm-up on a tiny layer, timed inside it (peak resident memory from the
   child itself):
   * straightforward: ``torch.autograd.functional.jacobian`` of the flattened layer over all
     parameters, then the singular values (``torch.linalg.svdvals``, what ``matrix_rank`` runs)
     and the rank and gap from them;
   * idlib: ``idlib.rank.measure(config, method="structured")`` (:mod:`idlib.fastrank`).
   Same parameters and inputs (idlib's seeded defaults).  A route stops when its next size is
   predicted (time ~ P^3 for the dense SVD, P^2.5 for the structured route, from its last run)
   to exceed ``--budget`` seconds; both always run P = 8,100 (the ratio's size).
3. ``python -m idlib verify --d-model 128 --heads 16 --method structured --json`` (P = 65,536):
   wall time and peak resident memory, read from benchmarks/results/verify_large.json
   (``verify_large.py``, which `make bench` runs first, with its three variants) or, without
   that file, run here; it is also the structured route's last point of the curve.

Writes benchmarks/results/rank_speed.json and four figures: rank_curve.png (time against P,
log-log, with the throughput limits), rank_gap_curve.png (the dense gap and idlib's certified
gap against P), rank_speed.png (the side-by-side at 4,096 and the verify run) and
rank_certificate.png (J's singular values at 4,096 parameters with idlib's two bounds).
"""
from __future__ import annotations

import argparse
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
import verify_large  # noqa: E402

from idlib.attention import flatten, forward, init_params, random_inputs, unflatten  # noqa: E402
from idlib.certify import CERTIFY_GAP, rank_from_singular_values  # noqa: E402
from idlib.config import AttentionConfig  # noqa: E402
from idlib.counting import count  # noqa: E402
from idlib.rank import default_n_sequences, default_seq_len, measure  # noqa: E402

# (d, H): P = 4 d^2 = 1,024 ... 65,536; (45, 5) is the 8,100 of the speed-up target
SIZES = ((16, 2), (24, 3), (32, 4), (45, 5), (64, 8), (90, 10), (128, 16))
SIDE_BY_SIDE = (32, 4)          # rank_speed.png / rank_certificate.png
RATIO_AT = (45, 5)              # the ratio the reproducibility page states (goal >= 20x)
LARGE = (128, 16)               # the verify run
TARGETS = {"speedup_min": 4.0, "ratio_8100_min": 20.0,
           "large_seconds_max": verify_large.TARGETS["seconds_max"],
           "large_memory_gb_max": verify_large.TARGETS["memory_gb_max"],
           "large_gap_min": verify_large.TARGETS["gap_min"]}
GROWTH = {"straightforward": 3.0, "idlib": 2.5}     # time ~ P^growth, to predict the next size


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6     # KiB on Linux


def inputs(config: AttentionConfig, seed: int = 0):
    n = default_seq_len(config)
    X = random_inputs(config, default_n_sequences(config, n), n, seed)
    return init_params(config, seed), X


def straightforward(config: AttentionConfig, seed: int = 0) -> tuple[dict, torch.Tensor]:
    params, X = inputs(config, seed)
    theta = flatten(params)

    def f(t: torch.Tensor) -> torch.Tensor:
        return forward(config, unflatten(config, t), X).reshape(-1)

    t0 = time.perf_counter()
    J = torch.autograd.functional.jacobian(f, theta)
    t1 = time.perf_counter()
    sv = torch.linalg.svdvals(J)
    rank, gap = rank_from_singular_values(sv, tuple(J.shape))
    t2 = time.perf_counter()
    return {"jacobian_seconds": t1 - t0, "rank_seconds": t2 - t1, "seconds": t2 - t0,
            "rank": rank, "gap": _finite(gap), "certified": bool(gap >= CERTIFY_GAP),
            "n_rows": J.shape[0], "sigma_r": sv[rank - 1].item() if rank else None}, sv


def idlib_route(config: AttentionConfig, seed: int = 0) -> dict:
    t0 = time.perf_counter()
    m = measure(config, seed=seed, method="structured")
    return {"seconds": time.perf_counter() - t0, "rank": m.rank, "gap": _finite(m.gap),
            "certified": bool(m.certified), "method": m.method, "n_rows": m.n_rows,
            "sigma_r_lower": m.singular_values[0].item(),
            "sigma_next_upper": m.singular_values[1].item() if m.singular_values.numel() > 1 else 0.0}


def one(route: str, d: int, h: int, sv_out: str | None) -> dict:
    """One (route, layer) measurement after a warm-up; run in a child process."""
    tiny = AttentionConfig(8, 2)
    if route == "straightforward":
        straightforward(tiny)
        res, sv = straightforward(AttentionConfig(d, h))
        if sv_out:
            torch.save(sv, sv_out)
    else:
        measure(tiny, method="structured")
        res = idlib_route(AttentionConfig(d, h))
    return dict(res, max_rss_gb=_rss_gb())


def child(route: str, d: int, h: int, sv_out: str | None = None) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", route, str(d), str(h)]
    if sv_out:
        cmd += ["--sv-out", sv_out]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-2000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]), process_seconds=time.perf_counter() - t0)


def throughput(n: int = 2000) -> dict:
    """float64 GFLOP/s of a GEMM (2 n^3 flops) and of svdvals on 1.5 n x n (4 m n^2 - 4 n^3 / 3)."""
    g = torch.Generator().manual_seed(0)
    A = torch.randn(n, n, dtype=torch.float64, generator=g)
    M = torch.randn(3 * n // 2, n, dtype=torch.float64, generator=g)
    best = {"gemm": math.inf, "svd": math.inf}
    for _ in range(3):
        t0 = time.perf_counter()
        A @ A
        best["gemm"] = min(best["gemm"], time.perf_counter() - t0)
        t0 = time.perf_counter()
        torch.linalg.svdvals(M)
        best["svd"] = min(best["svd"], time.perf_counter() - t0)
    m = 3 * n // 2
    return {"n": n, "gemm_gflops": 2 * n ** 3 / best["gemm"] / 1e9,
            "svd_gflops": svd_flops(m, n) / best["svd"] / 1e9}


def svd_flops(m: int, n: int) -> float:
    """Singular values of an m x n matrix (m >= n), Golub--Van Loan's count: 4 m n^2 - 4 n^3 / 3."""
    return 4.0 * m * n * n - 4.0 * n ** 3 / 3


def dense_rows(config: AttentionConfig) -> int:
    """Rows B n d of the Jacobian at idlib's default inputs."""
    n = default_seq_len(config)
    return default_n_sequences(config, n) * n * config.d_model


def recorded_large(path: Path) -> dict | None:
    """The plain d = 128 run of verify_large.py's record (None if there is none)."""
    if not path.exists():
        return None
    rec = json.loads(path.read_text())
    row = next((r for r in rec["runs"] if not r["flags"]), None)
    return None if row is None else dict(
        row, note=f"recorded by {rec['script']} on {rec['environment']['date']}")


MEMORY_GROWTH = 2.5     # peak memory ~ P^2.5 for the straightforward route (J alone ~ P^2)


def available_gb() -> float:
    """MemAvailable of /proc/meminfo in GB (inf where it cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1e6
    except OSError:
        pass
    return math.inf


def curve(budget: float, sizes, tmp: Path, large: dict | None, stops: dict) -> list[dict]:
    points: list[dict] = []
    for route in ("straightforward", "idlib"):
        last, stopped = None, False
        for d, h in sizes:
            P = 4 * d * d
            if large is not None and route == "idlib" and (d, h) == LARGE:
                points.append({"route": route, "d": d, "H": h, "n_params": P, "from": "verify",
                               "seconds": large["seconds"], "max_rss_gb": large["max_rss_gb"],
                               "rank": large["rank"], "gap": large["gap"],
                               "certified": large["certified"], "n_rows": large["n_rows"]})
                continue
            predicted = last["seconds"] * (P / last["n_params"]) ** GROWTH[route] if last else 0.0
            memory = last["max_rss_gb"] * (P / last["n_params"]) ** MEMORY_GROWTH if last else 0.0
            reason = (f"predicted over {budget:g} s" if predicted > budget else
                      f"predicted {memory:.0f} GB, over 80% of the {available_gb():.0f} GB available"
                      if memory > 0.8 * available_gb() else None)
            if (stopped or reason) and (d, h) != RATIO_AT:   # the ratio's size always runs
                if not stopped:
                    print(f"  {route}: stop before P = {P:,} ({reason})", flush=True)
                    stops[route] = f"stopped before P = {P:,}: {reason}"
                stopped = True
                continue
            sv_out = str(tmp / "sv.pt") if route == "straightforward" and (d, h) == SIDE_BY_SIDE else None
            try:
                r = child(route, d, h, sv_out)
            except RuntimeError as e:          # e.g. killed for memory: the route ends here
                print(f"  {route}: P = {P:,} failed, the route stops ({str(e)[-200:]})", flush=True)
                stops[route] = f"failed at P = {P:,}"
                stopped = True
                continue
            last = dict(r, route=route, d=d, H=h, n_params=P,
                        closed_form_identified=count(AttentionConfig(d, h)).identified)
            points.append(last)
            print(f"  {route:15s} P = {P:6,}: {r['seconds']:7.1f} s, {r['max_rss_gb']:.2f} GB, rank "
                  f"{r['rank']:,}, gap {r['gap'] if r['gap'] is None else format(r['gap'], '.2e')}",
                  flush=True)
            stopped = stopped or r["seconds"] > budget
    return points


def _point(points, route, dh):
    return next((p for p in points if p["route"] == route and (p["d"], p["H"]) == tuple(dh)), None)


def figures(result: dict, sv: torch.Tensor | None, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from idlib.report.plotting import COLORS, style

    style()
    pts, tp = result["curve"], result["throughput"]
    label = {"straightforward": "straightforward (jacobian + SVD)", "idlib": "idlib (structured)"}
    color = {"straightforward": COLORS["baseline"], "idlib": COLORS["measured"]}
    fig, ax = plt.subplots(figsize=(6.4, 4.3))
    for route in ("straightforward", "idlib"):
        xs = [p["n_params"] for p in pts if p["route"] == route]
        ax.loglog(xs, [p["seconds"] for p in pts if p["route"] == route], "o-", color=color[route],
                  label=label[route])
    grid = [4 * d * d for d, _ in SIZES]
    flops = [svd_flops(dense_rows(AttentionConfig(d, h)), 4 * d * d) for d, h in SIZES]
    ax.loglog(grid, [f / (tp["svd_gflops"] * 1e9) for f in flops], "--", color=COLORS["unidentified"],
              lw=1, label=f"dense SVD at the measured {tp['svd_gflops']:.0f} GFLOP/s (LAPACK)")
    ax.loglog(grid, [f / (tp["gemm_gflops"] * 1e9) for f in flops], ":", color=COLORS["unidentified"],
              lw=1, label=f"dense SVD flops at GEMM speed, {tp['gemm_gflops']:.0f} GFLOP/s (limit)")
    ax.set_xlabel("parameters $P$")
    ax.set_ylabel("seconds")
    ax.legend(fontsize=9, loc="upper left")
    fig.tight_layout()
    fig.savefig(out / "rank_curve.png", dpi=120, metadata={"Software": None})
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for route, name in (("straightforward", "dense route: $\\sigma_r / \\tau$"),
                        ("idlib", "idlib: certified lower bound")):
        sel = [p for p in pts if p["route"] == route and p["gap"]]
        ax.loglog([p["n_params"] for p in sel], [p["gap"] for p in sel], "o-", color=color[route],
                  label=name)
    ax.axhline(CERTIFY_GAP, color=COLORS["unidentified"], ls="--", lw=1, label="certified at $10^4$")
    ax.axhline(TARGETS["large_gap_min"], color=COLORS["closed_form"], ls=":", lw=1, label="$10^6$")
    ax.set_xlabel("parameters $P$")
    ax.set_ylabel(r"gap $\gamma = \sigma_r / \max(\sigma_{r+1}, \tau)$")
    ax.legend(fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "rank_gap_curve.png", dpi=120, metadata={"Software": None})
    plt.close(fig)

    s, L, t = result["small"], result["large"], result["targets"]
    if s is None:
        return
    # 9 in wide at width 100 %: text of 10 pt (the style's size; legends too) shows at about
    # 10 px in the book's column. The target is a dashed line labelled beside it, to its right,
    # where neither the bar nor the line runs through the label.
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.6))
    ax = axes[0]
    sf = s["straightforward"]
    ax.barh([1], [sf["jacobian_seconds"]], color=COLORS["baseline"], label="Jacobian")
    ax.barh([1], [sf["rank_seconds"]], left=[sf["jacobian_seconds"]], color=COLORS["unidentified"],
            label="singular values (SVD)")
    ax.barh([0], [s["idlib"]["seconds"]], color=COLORS["measured"], label="idlib measure()")
    ax.set_yticks([0, 1], ["idlib", "straightforward"])
    ax.set_xlabel("seconds")
    ax.set_title(f"{s['n_params']:,} parameters: {s['speedup']:.1f}x faster")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=2)
    ax = axes[1]
    if L is not None:
        target = t["large_seconds_max"]
        ax.barh([0], [L["seconds"]], color=COLORS["measured"])
        ax.axvline(target, color=COLORS["closed_form"], ls="--", lw=1.2)
        ax.set_xlim(0, 1.45 * max(target, L["seconds"]))
        ax.text(target * 1.03, 0, f"target\n{target:g} s", ha="left", va="center",
                color=COLORS["closed_form"])
        ax.set_title(f"{L['n_params']:,} parameters ({L['max_rss_gb']:.1f} GB peak)")
    ax.set_yticks([0], ["idlib verify"])
    ax.set_xlabel("seconds")
    for ax in axes:
        ax.grid(axis="y", visible=False)     # no line through the bars' labels
    fig.tight_layout()
    fig.savefig(out / "rank_speed.png", dpi=120, metadata={"Software": None})
    plt.close(fig)

    if sv is None:
        return
    fig, ax = plt.subplots(figsize=(6.4, 4.3))
    sv = sv.sort(descending=True).values
    rel = (sv / sv[0]).clamp_min(1e-18)
    ax.semilogy(range(1, len(rel) + 1), rel.numpy(), ".", ms=2, color=COLORS["measured"],
                label=r"$\sigma_i(J)$, dense SVD")
    r = s["idlib"]["rank"]
    lo, hi, gap = s["idlib"]["sigma_r_lower"], s["idlib"]["sigma_next_upper"], s["idlib"]["gap"]
    ax.axhline(lo / sv[0].item(), color=COLORS["closed_form"], lw=1,
               label=r"idlib: lower bound on $\sigma_r$")
    ax.axhline(max(hi, 1e-300) / sv[0].item(), color=COLORS["closed_form"], lw=1, ls="--",
               label=r"idlib: upper bound on $\sigma_{r+1}$")
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


def side_by_side(points) -> dict | None:
    sf, fast = _point(points, "straightforward", SIDE_BY_SIDE), _point(points, "idlib", SIDE_BY_SIDE)
    if sf is None or fast is None:
        return None
    config = AttentionConfig(*SIDE_BY_SIDE)
    return {"label": f"d_model = {SIDE_BY_SIDE[0]}, H = {SIDE_BY_SIDE[1]}", "config": config.to_dict(),
            "n_params": sf["n_params"], "n_rows": sf["n_rows"], "straightforward": sf, "idlib": fast,
            "speedup": sf["seconds"] / fast["seconds"], "same_rank": sf["rank"] == fast["rank"],
            "closed_form_identified": count(config).identified}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--budget", type=float, default=600.0, help="seconds one route may take per size")
    ap.add_argument("--max-d", type=int, default=128, help="largest d_model of the curve")
    ap.add_argument("--no-large", action="store_true", help="skip the d = 128 verify run")
    ap.add_argument("--large-from", default=str(HERE / "results" / "verify_large.json"),
                    help="verify_large.py's record: its plain d = 128 run is taken, not rerun")
    ap.add_argument("--one", nargs=3, metavar=("ROUTE", "D", "H"), help=argparse.SUPPRESS)
    ap.add_argument("--sv-out", help=argparse.SUPPRESS)
    ap.add_argument("--figures-only", action="store_true",
                    help="redraw the figures from the JSON already in --out (no measurement)")
    args = ap.parse_args(argv)
    if args.one:
        route, d, h = args.one
        print(json.dumps(one(route, int(d), int(h), args.sv_out)))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = ROOT / "_build" / "bench"
    if args.figures_only:
        sv_path = tmp / "sv.pt"
        figures(json.loads((out / "rank_speed.json").read_text()),
                torch.load(sv_path) if sv_path.exists() else None, out)
        return 0
    tmp.mkdir(parents=True, exist_ok=True)
    env = environment()
    print("float64 throughput ...", flush=True)
    tp = throughput()
    print(f"  GEMM {tp['gemm_gflops']:.1f} GFLOP/s, SVD {tp['svd_gflops']:.1f} GFLOP/s", flush=True)
    large = None
    sizes = [s for s in SIZES if s[0] <= args.max_d]
    if not args.no_large and LARGE in sizes:
        large = recorded_large(Path(args.large_from))
        if large is None:
            print(f"python -m idlib verify --d-model {LARGE[0]} --heads {LARGE[1]} ...", flush=True)
            large = dict(verify_large.verify(()), note=None)
        else:
            print(f"python -m idlib verify --d-model {LARGE[0]} --heads {LARGE[1]}: from {args.large_from}")
        print(f"  {large['seconds']:.1f} s, {large['max_rss_gb']:.2f} GB, rank {large['rank']:,}, gap "
              f"{large['gap'] if large['gap'] is None else format(large['gap'], '.2e')}, certified "
              f"{large['certified']}, agrees {large['agrees']}", flush=True)
    print("the curve ...", flush=True)
    stops: dict[str, str] = {}
    points = curve(args.budget, sizes, tmp, large, stops)
    sf8, id8 = _point(points, "straightforward", RATIO_AT), _point(points, "idlib", RATIO_AT)
    ratio = ({"n_params": sf8["n_params"], "straightforward_seconds": sf8["seconds"],
              "idlib_seconds": id8["seconds"], "ratio": sf8["seconds"] / id8["seconds"]}
             if sf8 and id8 else None)
    small = side_by_side(points)
    sv_path = tmp / "sv.pt"
    sv = torch.load(sv_path) if small is not None and sv_path.exists() else None
    met = {"ratio": ratio is not None and ratio["ratio"] >= TARGETS["ratio_8100_min"]}
    if large is not None:
        met["large"] = large["met"]
    result = {"script": "benchmarks/rank_speed.py", "environment": env, "targets": TARGETS,
              "throughput": tp, "budget_seconds": args.budget, "curve": points, "stops": stops,
              "ratio_at_8100": ratio, "small": small, "large": large, "met": met}
    (out / "rank_speed.json").write_text(json.dumps(result, indent=2) + "\n")
    figures(result, sv, out)
    if ratio:
        print(f"ratio at P = {ratio['n_params']:,}: {ratio['ratio']:.1f}x", flush=True)
    print(f"wrote {out / 'rank_speed.json'} and the figures; targets met: {met}", flush=True)
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
