"""Checks of the built PDF that the browser test makes on the HTML (run by `make pdf`).

    python tests/browser/check_pdf.py --log _build/latex/book.log --overfull-max 10 _build/latex/book.pdf

Fails (exit 1, one line per defect) on more overfull boxes in the LaTeX log than allowed
(text, tables or formulas running into the margin: the worst are listed with their width),
and on raw markup in the PDF's text (pdftotext): pipe-table rules, ``??``, unresolved roles,
TeX delimiters, and sentences that only make sense in the HTML ("this very HTML").
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

RAW = [
    (re.compile(r"\|\s*:?(?:-{2,}|[\u2013\u2014]+-*)\s*:?\|"), "raw pipe-table text"),
    (re.compile(r"\?\?"), "unresolved reference (??)"),
    (re.compile(r"\{(?:cite|numref|ref|eq|doc|prf:[a-z]+)(?::[a-z]+)?\}|:(?:prf:ref|cite|numref|ref|eq):"),
     "unresolved role"),
    (re.compile(r"\\\(|\\\)|\\\[|\\\]|\$\$|\\(?:frac|sigma|mathrm|operatorname|begin|top|sum|cdot)(?![A-Za-z])"),
     "raw TeX"),
    (re.compile(r"this (?:very )?HTML", re.I), "HTML-only wording"),
]
OVERFULL = re.compile(r"^Overfull \\hbox \(([0-9.]+)pt too wide\) (.*)$", re.M)


def overfull(log: str) -> list[tuple[float, str]]:
    """(points too wide, where) of every overfull \\hbox in a LaTeX log, widest first."""
    return sorted(((float(w), where) for w, where in OVERFULL.findall(log)), reverse=True)


def raw_markup(pages: list[str]) -> list[str]:
    out = []
    for i, page in enumerate(pages, 1):
        for rx, what in RAW:
            for m in rx.finditer(page):
                ctx = " ".join(page[max(0, m.start() - 40):m.end() + 40].split())
                out.append(f"page {i}: {what} {m.group(0)!r} in \"{ctx}\"")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pdf")
    ap.add_argument("--log", required=True, help="the LaTeX log (book.log)")
    ap.add_argument("--overfull-max", type=int, default=10)
    args = ap.parse_args(argv)
    problems = []
    boxes = overfull(Path(args.log).read_text(errors="replace"))
    big = [b for b in boxes if b[0] > 1.0]  # < 1 pt is invisible
    print(f"check_pdf: {len(big)} overfull boxes wider than 1 pt (allowed {args.overfull_max})"
          + (f", widest {big[0][0]:.0f} pt" if big else ""))
    if len(big) > args.overfull_max:
        problems += [f"overfull box {w:.1f} pt too wide {where}" for w, where in big[:15]]
        problems.append(f"{len(big)} overfull boxes > {args.overfull_max} allowed (OVERFULL_MAX)")
    text = subprocess.run(["pdftotext", "-layout", args.pdf, "-"], check=True,
                          capture_output=True, text=True).stdout
    pages = text.split("\f")
    problems += raw_markup(pages)
    for p in problems:
        print("check_pdf:", p)
    print(f"check_pdf: {len(pages)} pages, " + ("OK" if not problems else f"{len(problems)} problems"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
