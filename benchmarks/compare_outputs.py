"""Compare the text outputs of two executions of the same notebooks (``make determinism``).

    python benchmarks/compare_outputs.py --sanitize nbval_sanitize.cfg RUN1 RUN2

For every notebook in RUN1, each code cell's text outputs (streams, text/plain, text/markdown,
text/html, text/latex, errors) must be identical in RUN2 after the regex rules of the nbval
sanitize file (the same rewrites `make nbval` applies).  Stream outputs are first coalesced as
nbval does (``coalesce_streams``): every chunk of one stream (stdout, stderr) in a cell is merged
into one text at the place of its first chunk, carriage-return overwrites and backspaces are
applied, so the kernel's flush timing (how a print is cut into chunks) is never a difference.
Images are not compared.  Prints each difference (notebook, cell, first differing line) and
exits 1 if there is any.
"""
from __future__ import annotations

import argparse
import configparser
import re
import sys
from pathlib import Path
from typing import Any

import nbformat

TEXT_MIME = ("text/plain", "text/markdown", "text/html", "text/latex")


def rules(path: str | None) -> list[tuple[re.Pattern, str]]:
    if not path:
        return []
    cp = configparser.ConfigParser()
    cp.read(path)
    return [(re.compile(cp[s]["regex"]), cp[s]["replace"]) for s in cp.sections()]


CARRIAGE_RETURN = re.compile(r"^.*\r(?=[^\n])", re.MULTILINE)   # nbval's carriagereturn_pat
BACKSPACE = re.compile("[^\n]\x08")    # a character erased by a backspace (nbval's r"\b" is a word
                                       # boundary, and its loop never runs: this is what it means)


def coalesce_streams(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """nbval's merge: one output per stream name, at its first chunk; \r and \b applied."""
    merged: list[dict[str, Any]] = []
    streams: dict[str, dict[str, Any]] = {}
    for o in outputs:
        if o["output_type"] != "stream":
            merged.append(o)
        elif o["name"] in streams:
            streams[o["name"]]["text"] += o["text"]
        else:
            streams[o["name"]] = {"output_type": "stream", "name": o["name"], "text": o["text"]}
            merged.append(streams[o["name"]])
    for o in streams.values():
        old = None
        while old != o["text"]:
            old, o["text"] = o["text"], BACKSPACE.sub("", o["text"])
        o["text"] = CARRIAGE_RETURN.sub("", o["text"])
    return merged


def cell_texts(cell, subs) -> list[str]:
    out = []
    for o in coalesce_streams(cell.get("outputs", [])):
        if o["output_type"] == "stream":
            out.append(f"[{o['name']}] " + o["text"])
        elif o["output_type"] == "error":
            out.append(f"[error] {o['ename']}: {o['evalue']}")
        else:
            for mime in TEXT_MIME:
                if mime in o.get("data", {}):
                    text = o["data"][mime]
                    out.append(f"[{mime}] " + ("".join(text) if isinstance(text, list) else text))
    for pattern, repl in subs:
        out = [pattern.sub(repl, t) for t in out]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sanitize", help="nbval sanitize file (regex / replace sections)")
    ap.add_argument("run1")
    ap.add_argument("run2")
    args = ap.parse_args(argv)
    subs = rules(args.sanitize)
    n_diff = n_cells = 0
    notebooks = sorted(Path(args.run1).glob("*.ipynb"))
    for p1 in notebooks:
        p2 = Path(args.run2) / p1.name
        if not p2.exists():
            print(f"{p1.name}: missing in {args.run2}")
            n_diff += 1
            continue
        c1 = [c for c in nbformat.read(p1, as_version=4).cells if c.cell_type == "code"]
        c2 = [c for c in nbformat.read(p2, as_version=4).cells if c.cell_type == "code"]
        if len(c1) != len(c2):
            print(f"{p1.name}: {len(c1)} vs {len(c2)} code cells")
            n_diff += 1
            continue
        for i, (a, b) in enumerate(zip(c1, c2)):
            n_cells += 1
            ta, tb = cell_texts(a, subs), cell_texts(b, subs)
            if ta != tb:
                n_diff += 1
                la = "\n".join(ta).splitlines()
                lb = "\n".join(tb).splitlines()
                j = next((k for k, (x, y) in enumerate(zip(la, lb)) if x != y), min(len(la), len(lb)))
                print(f"{p1.name}: code cell {i} differs at line {j}:\n"
                      f"  run1: {la[j] if j < len(la) else '<end>'}\n"
                      f"  run2: {lb[j] if j < len(lb) else '<end>'}")
    print(f"{len(notebooks)} notebooks, {n_cells} code cells compared: "
          + ("identical text outputs" if n_diff == 0 else f"{n_diff} differences"))
    return 1 if n_diff else 0


if __name__ == "__main__":
    sys.exit(main())
