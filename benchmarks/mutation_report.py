"""The mutation score of idlib's core (``make mutation``): read mutmut's results, explain every
survivor, write benchmarks/results/mutation.json and mutation.md.

mutmut (pinned in requirements.txt, configured in pyproject.toml ``[tool.mutmut]``) mutates
counting, symmetry, attention, certify, rank and fastrank and runs the unit tests that reach each
mutated function.  A mutant is *killed* when a test fails (or its run exceeds the CPU-time limit,
``timeout``), *survived* when every test passes.  Each survivor must match one rule of
:data:`RULES`, a reason it cannot or need not be killed, checked against the mutated line (the
diff ``mutmut show`` prints); a survivor no rule explains is listed as unexplained and makes this
script exit 1.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTANTS = ROOT / "mutants"
OUT = ROOT / "benchmarks" / "results"
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped",
          36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout",
          None: "not checked"}

# (reason, function pattern, pattern the removed or added line must match)
RULES: list[tuple[str, str, str]] = []


def results() -> dict[str, str]:
    """mutant name -> status, from mutmut's result files."""
    out = {}
    for meta in sorted(MUTANTS.glob("idlib/**/*.meta")):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            out[name] = STATUS.get(code, "suspicious")
    return out


def diff(name: str) -> list[str]:
    """The changed lines of one mutant (``mutmut show``), '-' original and '+' mutated."""
    text = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=ROOT, text=True,
                          capture_output=True, check=True).stdout
    return [line for line in text.splitlines()
            if line[:1] in "-+" and not line.startswith(("---", "+++"))]


def explain(name: str, lines: list[str]) -> str | None:
    function = name.split("__mutmut_")[0]
    for reason, fpat, lpat in RULES:
        if re.search(fpat, function) and any(re.search(lpat, line) for line in lines):
            return reason
    return None


def module_of(name: str) -> str:
    return name.split(".")[1]


def main() -> int:
    status = results()
    if not status:
        print("mutation_report: no mutmut results under mutants/ (run make mutation)")
        return 1
    per_module: dict[str, Counter] = defaultdict(Counter)
    survivors = []
    for name, st in sorted(status.items()):
        per_module[module_of(name)][st] += 1
        if st == "survived":
            lines = diff(name)
            survivors.append({"mutant": name, "diff": lines, "reason": explain(name, lines)})
    total = Counter()
    for c in per_module.values():
        total.update(c)
    detected = total["killed"] + total["timeout"]
    judged = detected + total["survived"]
    summary = {"modules": {m: dict(c) for m, c in sorted(per_module.items())}, "total": dict(total),
               "score": detected / judged if judged else None,
               "explained": sum(s["reason"] is not None for s in survivors),
               "unexplained": [s["mutant"] for s in survivors if s["reason"] is None]}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "mutation.json").write_text(json.dumps({"summary": summary, "survivors": survivors}, indent=1))
    lines = ["# Mutation score of idlib's core", "",
             "| module | mutants | killed | timeout | survived | no tests | score |",
             "| :-- | --: | --: | --: | --: | --: | --: |"]
    for m, c in sorted(per_module.items()):
        j = c["killed"] + c["timeout"] + c["survived"]
        lines.append(f"| {m} | {sum(c.values())} | {c['killed']} | {c['timeout']} | {c['survived']} | "
                     f"{c['no tests']} | {(c['killed'] + c['timeout']) / j:.1%} |")
    lines.append(f"| all | {sum(total.values())} | {total['killed']} | {total['timeout']} | "
                 f"{total['survived']} | {total['no tests']} | {summary['score']:.1%} |")
    lines += ["", "score = (killed + timeout) / (killed + timeout + survived).", "",
              "## Survivors, by reason", ""]
    by_reason: dict[str, list] = defaultdict(list)
    for s in survivors:
        by_reason[s["reason"] or "NOT EXPLAINED"].append(s)
    for reason, group in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        lines += [f"### {reason} ({len(group)})", ""]
        for s in group:
            changed = " / ".join(x[1:].strip() for x in s["diff"])[:160]
            lines.append(f"- `{s['mutant']}`: `{changed}`")
        lines.append("")
    (OUT / "mutation.md").write_text("\n".join(lines))
    print(f"mutation score {summary['score']:.1%} ({detected} of {judged}); survivors "
          f"{total['survived']}, unexplained {len(summary['unexplained'])}")
    return 0 if not summary["unexplained"] else 1


if __name__ == "__main__":
    sys.exit(main())
