"""The record of one `make reproduce` run (every chapter at profile=full), compact, committed.

Reads the timings `make reproduce` wrote (``_build/timings/full.json``: seconds per chapter,
commit, machine) and the executed notebooks (``_build/reproduce/chapters/*.ipynb``), and keeps
for each chapter its time, its status and its verdict lines: the printed lines that state a
check ("8 of 8 configurations: measured rank = closed form", "agrees: True", "... below 1e-12:
True"), at most ``MAX_LINES`` of them, as printed.  Writes ``benchmarks/results/full_profile.json``
and ``full_profile.md`` (the table the reproducibility page shows beside the default profile).

    python benchmarks/full_profile.py [--root .] [--out benchmarks/results]
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

MAX_LINES = 6
VERDICT = re.compile(r"\b(\d+ of \d+|agrees?|certified|True|False|below 1e-\d+)\b")
NOISE = re.compile(r"\d+%\||\w=[^ ]+, \w+=|^(True|False)$")     # progress bars, reprs, bare booleans


def verdict_lines(notebook: Path) -> list[str]:
    """The printed lines of a notebook that state a check, in order, without duplicates."""
    nb = json.loads(notebook.read_text())
    out: list[str] = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code" or "injected-parameters" in cell.get("metadata", {}).get("tags", []):
            continue
        for o in cell.get("outputs", []):
            if o.get("output_type") != "stream" or o.get("name") != "stdout":
                continue
            text = "".join(o["text"]) if isinstance(o["text"], list) else o["text"]
            for line in text.splitlines():
                line = " ".join(line.split())
                if line and len(line) <= 120 and VERDICT.search(line) and not NOISE.search(line) \
                        and not line.startswith("|") and line not in out:
                    out.append(line)
    return out


def record(root: Path) -> dict:
    timings = json.loads((root / "_build" / "timings" / "full.json").read_text())
    chapters = []
    for c in timings["chapters"]:
        path = root / "_build" / "reproduce" / "chapters" / Path(c["notebook"]).name
        lines = verdict_lines(path) if path.exists() else []
        chapters.append({"notebook": c["notebook"], "seconds": c["seconds"], "status": c["status"],
                         "verdicts": lines[:MAX_LINES], "more_verdicts": max(0, len(lines) - MAX_LINES)})
    env = timings["environment"]
    return {"profile": "full", "git_commit": env.get("git_commit"), "date": env.get("date"),
            "machine": {k: env.get(k) for k in ("cpu", "cores", "torch_threads", "platform",
                                                "python", "torch", "load_average")},
            "total_seconds": round(sum(c["seconds"] for c in chapters), 1), "chapters": chapters}


def markdown(rec: dict) -> str:
    m = rec["machine"]
    load = ", ".join(f"{x:.1f}" for x in m.get("load_average") or [])
    lines = [f"Profile `full`, commit `{rec['git_commit']}`, {rec['date']}; {m['cpu']}, {m['cores']} "
             f"cores, torch {m['torch']} ({m['torch_threads']} threads), load average at the start "
             f"{load}: {rec['total_seconds'] / 60:.0f} minutes in all (the chapters as they were at "
             "that commit).", "",
             ":::{table} The full profile: each chapter's time and the checks it printed "
             "(verbatim, at most " f"{MAX_LINES} per chapter)", ":name: tab-repro-full",
             ":widths: 22 7 6 65", "",
             "| chapter | time | status | what it printed |", "|:--|--:|:--|:--|"]
    for c in rec["chapters"]:
        # verbatim, one bullet each (the PDF drops the <br>, the bullets keep the lines apart)
        said = "<br>".join("\u2022 `" + v.replace("`", "'").replace("|", "\\|") + "`"
                           for v in c["verdicts"]) or "(tables and figures only)"
        if c["more_verdicts"]:
            said += f"<br>... and {c['more_verdicts']} more"
        lines.append(f"| `{Path(c['notebook']).stem}` | {c['seconds'] / 60:.1f} min | {c['status']} | {said} |")
    return "\n".join(lines + [":::", ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path("."))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args(argv)
    rec = record(args.root)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "full_profile.json").write_text(json.dumps(rec, indent=1) + "\n")
    (args.out / "full_profile.md").write_text(markdown(rec))
    print(f"full profile record: {len(rec['chapters'])} chapters, {rec['total_seconds'] / 60:.0f} min, "
          f"commit {rec['git_commit']} -> {args.out}/full_profile.{{json,md}}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
