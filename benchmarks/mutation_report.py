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

REPO = Path(__file__).resolve().parent.parent
ROOT = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO      # where mutmut ran (mutants/ in it)
MUTANTS = ROOT / "mutants"
OUT = REPO / "benchmarks" / "results"
# optional: survivors of that run re-run against tests added since (name -> killed), as JSON
RECHECKED = json.loads(Path(sys.argv[2]).read_text()) if len(sys.argv) > 2 else {}
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped",
          36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout",
          None: "not checked"}

# (reason, pattern of the mutated function, pattern the mutated line must match)
RULES: list[tuple[str, str, str]] = [
    ("equivalent: einsum subscripts in upper case name the same axes", r".",
     r'einsum\("[A-Z.,]+->[A-Z.]+"'),
    ("equivalent: NORM_EPS is 0, adding or subtracting it is the same", r".", r"- NORM_EPS"),
    ("equivalent: float('-INF') is float('-inf')", r".", r'float\("-INF"\)'),
    ("equivalent: on a 4-d tensor transpose(-1, +2) is transpose(-1, -2)", r"attention_weights",
     r"transpose\(-1, \+2\)"),
    ("equivalent: the score matrix is square (n x n), shape[-2] is shape[-1]", r"attention_weights",
     r"scores\.shape\[-2\]"),
    ("equivalent: full_matrices defaults to True, and only the leading singular vectors are used",
     r"symmetry\.x_(null_space|tangent_basis)", r"svd\((M|T), (\)|full_matrices=True\))"),
    ("equivalent: R is square (k x k), shape[1] is shape[0]", r"symmetry\.x_(commutant_basis|gain_exchange_basis)",
     r"R\.shape\[1\]"),
    ("equivalent: the identity and the offsets are exact in any dtype and promote to float64",
     r"symmetry\.x_(rotation_matrix|_rotation_chart)", r"(dtype=None|eye\(k, \)|offset, \)\))"),
    ("equivalent: labels and counts are integers whatever the dtype argument (torch infers long)",
     r"counting\.x__group", r"(dtype=None|torch\.zeros\(n, \)|len\(phi\), \)|torch\.zeros\(0, \))"),
    ("equivalent: a tie (a singular value, gap or angle exactly at its threshold) that generic inputs do not reach",
     r"(symmetry\.x_(null_space|tangent_basis|gain_exchange_basis)|counting\.x__group)", r"(>=|<=)"),
    ("equivalent: at k = d_in (v = d_in) the null-move count is 0 either way",
     r"symmetry\.x__rotation_chart", r"if (k|v) >= d_in"),
    ("equivalent: a stack's only non-per-layer tensors are W_K, W_V, b_K, g_K (a stack with latent, "
     "v/o biases or LayerNorm QK-norm is refused by check_derived)", r"attention\.x_layer_params", r"or True"),
    ("equivalent: for a one-layer config replace(n_layers=1, kv_share=1) is the config itself",
     r"attention\.x_layer_config", r"and False"),
    ("performance only: the chunk sizes of the vectorised Jacobians", r"(fastrank|rank)\\.",
     r"(jchunk = |chunk: int = )"),
    ("diagnostics only: the timings in factors['seconds'] (their keys and range are tested)",
     r"fastrank\.x_structured_rank", r"seconds"),
]


def results() -> dict[str, str]:
    """mutant name -> status, from mutmut's result files."""
    out = {}
    for meta in sorted(MUTANTS.glob("idlib/**/*.meta")):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            out[name] = STATUS.get(code, "suspicious")
            if out[name] == "survived" and RECHECKED.get(name):
                out[name] = "killed"
    return out


def diff(name: str) -> list[str]:
    """The changed lines of one mutant (``mutmut show``), '-' original and '+' mutated."""
    text = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=ROOT, text=True,
                          capture_output=True, check=True).stdout
    return [line for line in text.splitlines()
            if line[:1] in "-+" and not line.startswith(("---", "+++"))]


def explain(name: str, lines: list[str]) -> str | None:
    function = name.split("__mutmut_")[0]
    added = [line[1:] for line in lines if line.startswith("+")]
    for reason, fpat, lpat in RULES:
        if re.search(fpat, function) and any(re.search(lpat, line) for line in added):
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
               "killed_by_tests_added_after_the_run": sorted(n for n, k in RECHECKED.items() if k),
               "explained": sum(s["reason"] is not None for s in survivors),
               "unexplained": [s["mutant"] for s in survivors if s["reason"] is None]}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "mutation.json").write_text(json.dumps({"summary": summary, "survivors": survivors}, indent=1))
    stats = MUTANTS / "mutmut-stats.json"
    commit = json.loads(stats.read_text()).get("git_commit", "?") if stats.exists() else "?"
    summary["run_at_commit"] = commit
    lines = ["# Mutation score of idlib's core", "",
             f"mutmut 3.8.1 run over the sources and tests of commit {commit[:10]}"
             + (" (survivors then re-run against the tests added after it)" if RECHECKED else "") + ".", "",
             "| module | mutants | killed | timeout | survived | no tests | not checked | score |",
             "| :-- | --: | --: | --: | --: | --: | --: | --: |"]
    for m, c in sorted(per_module.items()):
        j = c["killed"] + c["timeout"] + c["survived"]
        score = f"{(c['killed'] + c['timeout']) / j:.1%}" if j else "-"
        lines.append(f"| {m} | {sum(c.values())} | {c['killed']} | {c['timeout']} | {c['survived']} | "
                     f"{c['no tests']} | {c['not checked']} | {score} |")
    lines.append(f"| all | {sum(total.values())} | {total['killed']} | {total['timeout']} | "
                 f"{total['survived']} | {total['no tests']} | {total['not checked']} | "
                 f"{summary['score']:.1%} |")
    lines += ["", "score = (killed + timeout) / (killed + timeout + survived); *not checked*: "
              "mutants the run did not reach.", ""]
    if RECHECKED:
        lines += [f"{len(summary['killed_by_tests_added_after_the_run'])} of the run's survivors are "
                  "killed by tests added after it (re-run against them; counted as killed).", ""]
    lines += [
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
