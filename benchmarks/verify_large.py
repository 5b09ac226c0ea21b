"""Verification at d = 128, H = 16 (P = 65,536 parameters) by the structured route: the plain
layer and three variants.

    python benchmarks/verify_large.py          (what `make bench` runs first; ~25 minutes on 2 cores)

Runs ``python -m idlib verify --d-model 128 --heads 16 --method structured [FLAG] --json`` (the
structured engine, idlib.fastrank: "auto" now takes the block route at this size, which
benchmarks/verify_block.py records) for FLAG in
``VARIANTS`` (grouped queries, full RoPE, all four biases), one subprocess each, and records the
wall time, the child's own peak resident memory (``os.wait4``), the measured rank, the certified
gap and the verdict in benchmarks/results/verify_large.json; the reproducibility page shows the
table (``benchmarks/report.py``), and ``rank_speed.py`` takes the plain layer's run as the last
point of its curve.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from environment import environment, run_verify  # noqa: E402

LAYER = ("--d-model", "128", "--heads", "16", "--method", "structured")
VARIANTS = {(): "multi-head", ("--kv-heads", "4"): "4 key/value groups",
            ("--rope-fraction", "1"): "full RoPE", ("--bias", "qkvo"): "biases q, k, v, o"}
TARGETS = {"seconds_max": 600.0, "memory_gb_max": 16.0, "gap_min": 1e6}


def layer_name(flags: str) -> str:
    """The table's name of a run recorded with these flags ("--kv-heads 4" -> "4 key/value groups")."""
    return {" ".join(k): v for k, v in VARIANTS.items()}.get(flags, flags)


def verify(flags: tuple[str, ...]) -> dict:
    """One ``idlib verify --json`` run: its report, wall seconds and peak RSS (GB) of that child."""
    report, seconds, usage = run_verify([*LAYER, *flags])
    num = report["numerical"]
    row = {"command": " ".join(["python", "-m", "idlib", "verify", *LAYER, *flags]),
           "flags": " ".join(flags), "seconds": seconds, "max_rss_gb": usage.ru_maxrss / 1e6,
           "n_params": num["n_params"], "n_rows": num["n_rows"], "rank": num["rank"],
           "closed_form_identified": report["identified"], "unidentified": report["unidentified"],
           "gap": num["gap"], "certified": num["certified"], "agrees": report["agrees"],
           "exit_code": report["exit_code"]}
    row["met"] = bool(row["agrees"] and row["seconds"] <= TARGETS["seconds_max"]
                      and row["max_rss_gb"] <= TARGETS["memory_gb_max"]
                      and (row["gap"] is None or row["gap"] >= TARGETS["gap_min"]))
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "results" / "verify_large.json"))
    args = ap.parse_args(argv)
    env = environment()
    rows = []
    for flags in VARIANTS:
        print(f"python -m idlib verify {' '.join(LAYER + flags)} ...", flush=True)
        r = verify(flags)
        rows.append(r)
        print(f"  {r['seconds']:.0f} s, {r['max_rss_gb']:.2f} GB, rank {r['rank']:,} of "
              f"{r['n_params']:,}, gap {r['gap']:.2e}, agrees {r['agrees']}, targets met {r['met']}",
              flush=True)
    result = {"script": "benchmarks/verify_large.py", "environment": env, "targets": TARGETS,
              "runs": rows, "met": all(r["met"] for r in rows)}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}; targets met: {result['met']}", flush=True)
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
