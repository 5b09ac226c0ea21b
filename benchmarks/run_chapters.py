"""Execute chapters through papermill with one profile, printing progress and recording timings.

    python benchmarks/run_chapters.py --profile full --out _build/reproduce/chapters \
        --timings _build/timings/full.json chapters/*.ipynb

Each notebook runs with its ``parameters`` cell set to ``profile=PROFILE`` (papermill injects
the values after that cell), kernel "python3", working directory = the notebook's folder (as in
the book build and nbval).  Every notebook is attempted; the exit code is 1 if any failed.  The
timings file (JSON) records, per notebook, the wall-clock seconds, the status, the date and
the commit, merged into what the file already holds (a run of one chapter updates that
chapter's entry only), and the environment (Python, torch, platform, CPU, cores) of the latest
run; the reproducibility page shows it (benchmarks/report.py).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import environment, utc_now  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="default")
    ap.add_argument("--out", required=True, help="folder for the executed notebooks")
    ap.add_argument("--timings", help="write the timings JSON here")
    ap.add_argument("notebooks", nargs="+")
    args = ap.parse_args(argv)

    import papermill

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    record = {"profile": args.profile, "started": utc_now(), "environment": environment(),
              "chapters": []}
    total0 = time.perf_counter()
    n = len(args.notebooks)
    for i, nb in enumerate(args.notebooks, 1):
        src = Path(nb)
        dst = out_dir / src.name
        print(f"[{i}/{n}] {src} (profile={args.profile}) -> {dst} ...", flush=True)
        t0 = time.perf_counter()
        status, error = "ok", None
        try:
            papermill.execute_notebook(str(src), str(dst), parameters={"profile": args.profile},
                                       kernel_name="python3", cwd=str(src.parent),
                                       progress_bar=False, log_output=False)
        except Exception as e:  # papermill.PapermillExecutionError and kernel failures alike
            status = "failed"
            error = " ".join(str(e).split())[:400]
        seconds = time.perf_counter() - t0
        record["chapters"].append({"notebook": str(src), "seconds": round(seconds, 2),
                                   "status": status, "error": error, "date": utc_now(),
                                   "git_commit": record["environment"]["git_commit"]})
        print(f"[{i}/{n}] {src}: {status} in {seconds:.1f} s "
              f"(total {time.perf_counter() - total0:.1f} s)", flush=True)
        if error:
            print(f"    {error}", flush=True)
    record["finished"] = utc_now()
    record["total_seconds"] = round(time.perf_counter() - total0, 2)
    if args.timings:
        path = Path(args.timings)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            old = json.loads(path.read_text())
            old = old if old.get("profile") == args.profile else {}
        except (OSError, ValueError):
            old = {}
        now = {c["notebook"] for c in record["chapters"]}
        kept = [c for c in old.get("chapters", []) if c.get("notebook") not in now]
        merged = dict(record, chapters=sorted(kept + record["chapters"], key=lambda c: c["notebook"]))
        path.write_text(json.dumps(merged, indent=2) + "\n")
    failed = [c["notebook"] for c in record["chapters"] if c["status"] != "ok"]
    print(f"{n - len(failed)}/{n} notebooks ran with profile={args.profile} "
          f"in {record['total_seconds']:.1f} s" + (f"; FAILED: {', '.join(failed)}" if failed else ""),
          flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
