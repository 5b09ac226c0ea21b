"""The claims page (claims.md) lists every result of the book with its true status.

The results are read from the chapters when the tests run (every ``{prf:...}`` directive with a
``:label:`` in chapters/*.ipynb and chapters/*.md; never a list kept here), so a theorem added,
relabelled or demoted to a sketch in a chapter fails this test until claims.md says so:

- every theorem, proposition, lemma, corollary and conjecture is on claims.md, in its table
  "Every result, one by one", in exactly one row;
- that row's status says "sketch" exactly when the directive's title contains "(proof sketch)"
  (the book's convention, HELPERS.md), "conjecture" exactly for a conjecture, and "proved"
  otherwise;
- every other table row of claims.md that cites results says "sketch" / "conjecture" exactly
  when one of its results is one;
- the convention itself: a proof that starts with *Sketch.* belongs to a result titled
  "(proof sketch)", and the proof of such a result starts with *Sketch.*.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLAIMS = ROOT / "claims.md"
RESULT_KINDS = ("theorem", "proposition", "lemma", "corollary", "conjecture")
OPEN = re.compile(r"^\s*(?P<fence>`{3,}|:{3,})\{prf:(?P<kind>[a-z]+)\}[ \t]*(?P<title>.*)$")
OPTION = re.compile(r"^\s*:(?P<key>[\w-]+):\s*(?P<value>.*)$")
REF = re.compile(r"\{prf:ref\}`(?:[^`<]*<)?(?P<label>[\w:-]+)>?`")
SKETCH_TITLE = "(proof sketch)"


@dataclass
class Directive:
    kind: str
    title: str
    label: str | None
    body: str
    where: str


def markdown_of(path: Path) -> list[tuple[str, str]]:
    """(where, Markdown) of a page: the file, or a notebook's markdown cells and Markdown outputs."""
    name = str(path.relative_to(ROOT))
    if path.suffix == ".md":
        return [(name, path.read_text(encoding="utf-8"))]
    nb = json.loads(path.read_text(encoding="utf-8"))
    texts = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "markdown":
            texts.append((f"{name} cell {i}", "".join(cell["source"])))
        for out in cell.get("outputs", []):
            md = out.get("data", {}).get("text/markdown")
            if md:
                texts.append((f"{name} cell {i} output", "".join(md)))
    return texts


def directives(text: str, where: str) -> list[Directive]:
    """Every {prf:...} directive of a Markdown text: kind, title, label and body (its own text,
    up to the fence that closes it)."""
    lines, found = text.split("\n"), []
    for i, line in enumerate(lines):
        m = OPEN.match(line)
        if not m:
            continue
        fence, options, j = m["fence"], {}, i + 1
        while j < len(lines) and (o := OPTION.match(lines[j])) and not lines[j].strip().startswith(fence[0] * 3):
            options[o["key"]] = o["value"].strip()
            j += 1
        body = []
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j])
            j += 1
        found.append(Directive(m["kind"], m["title"].strip(), options.get("label"),
                               "\n".join(body).strip(), f"{where} line {i + 1}"))
    return found


def chapter_directives() -> list[Directive]:
    out = []
    for path in sorted([*(ROOT / "chapters").glob("*.ipynb"), *(ROOT / "chapters").glob("*.md")]):
        for where, text in markdown_of(path):
            out += directives(text, where)
    return out


DIRECTIVES = chapter_directives()
RESULTS = [d for d in DIRECTIVES if d.kind in RESULT_KINDS]


def expected_status(d: Directive) -> str:
    if d.kind == "conjecture":
        return "conjecture"
    return "sketch" if SKETCH_TITLE in d.title.lower() else "proved"


def status_words(status: str) -> set[str]:
    s = status.lower()
    return {w for w in ("sketch", "conjecture", "proved") if w in s}


def table_rows(text: str) -> list[tuple[str, list[str]]]:
    """(section title, cells) of every body row of every pipe table of a Markdown page."""
    rows, section, header = [], "", None
    for line in text.split("\n"):
        if line.startswith("#"):
            section, header = line.lstrip("#").strip(), None
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not all(re.fullmatch(r":?-+:?", c) for c in cells):
            rows.append((section, dict(zip(header, cells))))
    return rows


ROWS = table_rows(CLAIMS.read_text(encoding="utf-8"))
ONE_BY_ONE = "Every result, one by one"


def test_the_chapters_are_read():
    """The reader finds the book's results (a test that reads nothing could not fail)."""
    labels = {d.label for d in RESULTS}
    assert len(RESULTS) >= 30 and {"thm-sh-count", "thm-rope-sees", "conj-var-stack"} <= labels
    assert all(d.label for d in RESULTS), [d.where for d in RESULTS if not d.label]
    assert len(labels) == len(RESULTS), "two results share a label"
    assert any(d.kind == "proof" for d in DIRECTIVES)


def test_every_result_is_on_the_claims_page_once_with_its_status():
    one_by_one = [r for s, r in ROWS if s == ONE_BY_ONE]
    assert one_by_one, f"claims.md has no table under '## {ONE_BY_ONE}'"
    problems = []
    for d in RESULTS:
        rows = [r for r in one_by_one if any(m["label"] == d.label for m in REF.finditer(r["result"]))]
        if len(rows) != 1:
            problems.append(f"{d.label} ({d.kind} '{d.title}', {d.where}): in {len(rows)} rows of "
                            f"'{ONE_BY_ONE}' (needs exactly one)")
            continue
        want, have = expected_status(d), status_words(rows[0]["status"])
        if have != {want}:
            problems.append(f"{d.label} ({d.kind} '{d.title}'): status '{rows[0]['status']}' on claims.md, "
                            f"should say '{want}' (and none of {sorted({'sketch', 'conjecture', 'proved'} - {want})})")
    labels = {d.label for d in RESULTS}
    for r in one_by_one:
        for m in REF.finditer(r["result"]):
            if m["label"] not in labels:
                problems.append(f"claims.md lists {m['label']}, which no chapter states")
    assert not problems, "\n".join(problems)


def test_grouped_rows_say_sketch_and_conjecture_when_a_result_is_one():
    by_label = {d.label: d for d in RESULTS}
    problems = []
    for section, r in ROWS:
        if section == ONE_BY_ONE or "status" not in r:
            continue
        cited = [by_label[m["label"]] for cell in r.values() for m in REF.finditer(cell)
                 if m["label"] in by_label]
        if not cited:
            continue
        have = status_words(r["status"])
        for word in ("sketch", "conjecture"):
            is_one = [d.label for d in cited if expected_status(d) == word]
            if bool(is_one) != (word in have):
                problems.append(f"'{section}' row citing {', '.join(d.label for d in cited)}: status "
                                f"'{r['status']}' " + (f"must say '{word}' ({', '.join(is_one)})" if is_one
                                                        else f"says '{word}' but none of them is one"))
    assert not problems, "\n".join(problems)


def test_a_sketch_is_titled_and_written_as_one():
    """A result titled "(proof sketch)" has a proof that starts with *Sketch.*, and a proof that
    starts with *Sketch.* follows a result so titled (the proof after a result is its proof)."""
    problems, last = [], None
    for d in DIRECTIVES:
        if d.kind in RESULT_KINDS:
            last = d
            continue
        if d.kind != "proof" or last is None:
            continue
        sketch_proof = d.body.lstrip().startswith(("*Sketch.*", "_Sketch._", "**Sketch.**"))
        sketch_title = SKETCH_TITLE in last.title.lower()
        if sketch_proof != sketch_title:
            problems.append(f"{last.label} '{last.title}' ({last.where}): " +
                            ("titled a proof sketch, its proof does not start with *Sketch.*" if sketch_title
                             else "its proof starts with *Sketch.*, the title lacks '(proof sketch)'"))
        last = None
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("text, want", [
    ("```{prf:theorem} The count (proof sketch)\n:label: thm-a\n:nonumber:\n\nBody.\n```", "sketch"),
    (":::{prf:conjecture} Stack count\n:label: conj-b\n\nBody.\n:::", "conjecture"),
    ("````{prf:lemma} A shared factor\n:label: thm-c\nBody $x$.\n````", "proved"),
])
def test_reader_on_made_up_directives(text, want):
    (d,) = directives(text, "made up")
    assert d.label in ("thm-a", "conj-b", "thm-c") and d.body.startswith("Body")
    assert expected_status(d) == want


def test_table_reader_and_status_words():
    rows = table_rows("## S\n\n| result | status |\n|:--|:--|\n| {prf:ref}`thm-a` | book, proof sketch |\n")
    assert rows == [("S", {"result": "{prf:ref}`thm-a`", "status": "book, proof sketch"})]
    assert status_words("book, proof sketch") == {"sketch"}
    assert status_words("paper, proved") == {"proved"}
    assert [m["label"] for m in REF.finditer("{prf:ref}`thm-a`, {prf:ref}`the text <conj-b>`")] == ["thm-a", "conj-b"]
