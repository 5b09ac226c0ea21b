"""Checks of the built PDF that the browser test makes on the HTML (run by `make pdf`).

    python tests/browser/check_pdf.py --log _build/latex/book.log --overfull-max 10 --overfull-pt 15 _build/latex/book.pdf

Fails (exit 1, one line per defect) on more places with overfull boxes in the LaTeX log than
allowed (text, tables or formulas running into the margin: the worst are listed with their
width and book.tex line), on raw markup in the LaTeX source outside code listings (pipe-table
rules, unresolved roles, TeX delimiters as text), and in the PDF's text (pdftotext) on ``??``
and sentences that only make sense in the HTML ("this very HTML").
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

# Raw markup in the LaTeX source, outside code listings (Sphinx escapes | - \\ { } $ in text).
RAW_TEX = [
    (re.compile(r"\\textbar\{\}\s*(?:(?:\\sphinxhyphen\{\}){2,}|[\u2013\u2014])"), "raw pipe-table text"),
    (re.compile(r"\\\{(?:cite|numref|ref|eq|doc|prf:[a-z]+)(?::[a-z]+)?\\\}|:(?:prf:ref|cite|numref|ref|eq):"),
     "unresolved role"),
    (re.compile(r"\\textbackslash\{\}(?:\(|\)|\[|\]|[A-Za-z]{2,})|\\\$\\\$"), "raw TeX"),
]
CODE = re.compile(r"\\begin\{sphinxVerbatim[a-z]*\}.*?\\end\{sphinxVerbatim[a-z]*\}"
                  r"|\\sphinxcode\{\\sphinxupquote\{.*?\}\}", re.S)
# In the PDF's text: what LaTeX prints for an undefined reference, and HTML-only wording.
RAW_PDF = [
    (re.compile(r"\?\?"), "unresolved reference (??)"),
    (re.compile(r"this (?:very )?HTML", re.I), "HTML-only wording"),
]
OVERFULL = re.compile(r"^Overfull \\hbox \(([0-9.]+)pt too wide\) (.*)$", re.M)


def overfull(log: str) -> list[tuple[float, str]]:
    """(points too wide, where) of each overfull \\hbox in a LaTeX log, one per source place
    (tables are set several times and repeat their warnings), widest first."""
    worst: dict[str, float] = {}
    for w, where in OVERFULL.findall(log):
        worst[where] = max(worst.get(where, 0.0), float(w))
    return sorted(((w, where) for where, w in worst.items()), reverse=True)


def raw_markup_tex(tex: str) -> list[str]:
    out = []
    prose = CODE.sub(lambda m: "\n" * m.group(0).count("\n"), tex)  # keep line numbers
    for rx, what in RAW_TEX:
        seen = set()
        for m in rx.finditer(prose):
            line = prose.count("\n", 0, m.start()) + 1
            if line in seen:  # one report per line of book.tex and kind
                continue
            seen.add(line)
            ctx = " ".join(prose[max(0, m.start() - 50):m.end() + 50].split())
            out.append(f"book.tex line {line}: {what} {m.group(0)!r} in \"{ctx}\"")
    return out


def raw_markup_pdf(pages: list[str]) -> list[str]:
    out = []
    for i, page in enumerate(pages, 1):
        for rx, what in RAW_PDF:
            for m in rx.finditer(page):
                ctx = " ".join(page[max(0, m.start() - 40):m.end() + 40].split())
                out.append(f"page {i}: {what} {m.group(0)!r} in \"{ctx}\"")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pdf")
    ap.add_argument("--log", required=True, help="the LaTeX log (book.log)")
    ap.add_argument("--overfull-max", type=int, default=10, help="places over 1 pt allowed")
    ap.add_argument("--overfull-pt", type=float, default=15.0, help="no box wider than this (pt)")
    args = ap.parse_args(argv)
    problems = []
    log = Path(args.log).read_text(errors="replace")
    if "There were undefined references" in log:
        problems.append("the LaTeX log ends with undefined references (they print as ??)")
    boxes = overfull(log)
    big = [b for b in boxes if b[0] > 1.0]  # < 1 pt is invisible
    print(f"check_pdf: {len(big)} places with overfull boxes wider than 1 pt (allowed {args.overfull_max})"
          + (f", widest {big[0][0]:.0f} pt" if big else ""))
    wide = [b for b in big if b[0] > args.overfull_pt]
    if len(big) > args.overfull_max or wide:
        problems += [f"overfull box {w:.1f} pt too wide {where} of book.tex" for w, where in big[:15]]
    if len(big) > args.overfull_max:
        problems.append(f"{len(big)} places with overfull boxes > {args.overfull_max} allowed (OVERFULL_MAX)")
    if wide:
        problems.append(f"{len(wide)} overfull boxes wider than {args.overfull_pt:g} pt (OVERFULL_PT): "
                        "text, a table or a formula into the margin or off the page")
    text = subprocess.run(["pdftotext", "-layout", args.pdf, "-"], check=True,
                          capture_output=True, text=True).stdout
    pages = text.split("\f")
    problems += raw_markup_pdf(pages)
    problems += raw_markup_tex(Path(args.pdf).with_suffix(".tex").read_text(errors="replace"))
    for p in problems:
        print("check_pdf:", p)
    print(f"check_pdf: {len(pages)} pages, " + ("OK" if not problems else f"{len(problems)} problems"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
