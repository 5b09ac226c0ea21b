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
OUT = REPO / "benchmarks" / "results"
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
     r"(symmetry\.x_(null_space|tangent_basis|gain_exchange_basis|canonical_basis)|counting\.x__group)",
     r"(>=|<=)"),
    ("equivalent: with r = 0 both branches give the empty (n, 0) basis", r"symmetry\.x_canonical_basis",
     r"if \(r == n\) or True else N"),
    ("equivalent: a third Gram-Schmidt pass changes the vector by round-off only (two are enough, Kahan)",
     r"symmetry\.x_canonical_basis", r"for _ in range\(3\)"),
    ("equivalent: at k = d_in (v = d_in) the null-move count is 0 either way",
     r"symmetry\.x__rotation_chart", r"if (k|v) >= d_in"),
    ("equivalent: a stack's only non-per-layer tensors are W_K, W_V, b_K, g_K (a stack with latent, "
     "v/o biases or LayerNorm QK-norm is refused by check_derived)", r"attention\.x_layer_params", r"or True"),
    ("equivalent: for a one-layer config replace(n_layers=1, kv_share=1) is the config itself",
     r"attention\.x_layer_config", r"and False"),
    ("performance only: the chunk sizes of the vectorised Jacobians", r"(fastrank|rank)\.",
     r"(jchunk = |chunk: int = )"),
    ("equivalent: positions.to(None) keeps the integer positions, and the product with the float64 "
     "frequencies promotes them exactly", r"attention\.x_apply_rope", r"positions\.to\(None\)"),
    ("equivalent: 'X' is no bias letter (has_bias('X') is False): the loop adds the same biases",
     r"attention\.x_param_shapes", r'"XXqkvoXX"'),
    ("equivalent: rotary_dim is even, so r / 2 is r // 2 (and arange with dtype float64 is the same)",
     r"(attention\.x_rope_frequencies|counting\.x_layer_classes)", r"r / 2"),
    ("equivalent: at rotary_dim 0 both branches return the empty tensor", r"attention\.x_rope_frequencies",
     r"if \(r\) or True"),
    ("equivalent: sigma_{r+1} <= tau by the definition of r, so max(sigma_{r+1}, tau) is tau either way",
     r"certify\.x_rank_from_singular_values", r"and False else 0\.0"),
    ("equivalent: a tie (a singular value exactly at the tolerance) that generic inputs do not reach",
     r"certify\.x_rank_from_singular_values", r"sv >= tol"),
    ("equivalent: the budget is 0 only for one-token sequences, where rows_bound = P / d > 1 wins",
     r"rank\.x_default_n_sequences", r"if budget else 1\.0"),
    ("equivalent: without a latent (kv_latent None) lat_fiber is not used", r"counting\.x_count",
     r"b, lat_fiber, extra = d_in, 1, 0"),
    ("equivalent: a (d_in + 1 with a query bias) is used only when the query bias is present",
     r"counting\.x_count", r'a = d_in \+ 1 if \(has\("q"\)\) or True'),
    ("equivalent: gain_unid is set in every branch that uses it (qk_norm other than none and plain)",
     r"counting\.x_count", r"gain_unid = (None|1)$"),
    ("equivalent: the call only validates explicit frequencies; without RoPE layer_classes(config, "
     "None) returns, with RoPE the next line makes the same call", r"counting\.x_count",
     r"if frequencies is not None or not r:"),
    ("equivalent: where both are valid (rope_base >= 1) the closed-form classes are the tabulated "
     "ones (tests/test_counting.py compares them), so moving the switch between them changes nothing",
     r"counting\.x_layer_classes", r"(r // 3 <= CLOSED|r // 2 < CLOSED|rope_base <= 1\.0|rope_base < 2\.0)"),
    ("equivalent: at k = b both branches of the fiber give k^2", r"counting\.x_factor_fiber",
     r"if k < b:"),
    ("equivalent: at C = d_in both branches give d_in^2 and no extra column", r"counting\.x_latent_fiber",
     r"if C < d_in:"),
    ("equivalent: kv_latent is never None, so 'continue' is reached only in the last iteration, "
     "where it is 'break'", r"counting\.x_check_derived_latent", r"^\s*break$"),
    ("equivalent: torch indexes with a list of whole-number floats as with ints",
     r"symmetry\.x_act", r"runs = \[layer / config\.kv_share"),
    ("equivalent: for every stack check_derived allows, the tensors off the head and group axes "
     "(b_O, the gains) are 1-d or read as (-1, k), and _unflat restores their shapes",
     r"symmetry\.x__flat", r"or True else p"),
    ("equivalent in practice: with s_max between 1e-2 and 1e4, rtol s_max and rtol / s_max both "
     "separate the orbit's singular values (>= 1e-3 s_max) from round-off (~1e-14 s_max)",
     r"symmetry\.x_tangent_basis", r"rtol / s\.max\(\)"),
    ("equivalent: the sort's stability only orders tied angles, and each class takes the smallest "
     "index of its members (scatter_reduce amin) whatever their order", r"counting\.x__group",
     r"sort\(descending=True, (stable=(None|False))?\)"),
    ("equivalent: with no rotating plane (n = 0) label, first and mults are not read or are empty "
     "either way", r"counting\.x__group",
     r"(label = None|if n else 1,\)|reduce=\"amin\"\) if \(n\) or True|if \(n\) or True else torch\.zeros)"),
    ("equivalent: minlength is label.max() + 1, the length bincount returns anyway",
     r"counting\.x__group", r"torch\.bincount\(label, \)"),
    ("equivalent: j > i always (asc[i] + delta > asc[i]), so max(j, i - 1) is j; side only matters "
     "at exact ties", r"counting\.x__group", r"(max\(j, i - 1\)|side=None|delta, \)\))"),
    ("equivalent: a run of two planes joined by a gap < delta is within delta of its head",
     r"counting\.x__group", r"runs > 2"),
    ("equivalent: a tie (a gap exactly delta) that generic frequencies do not reach",
     r"counting\.x__group", r"gaps > delta"),
    ("equivalent: layernorm_shared is derived only with RoPE (check_derived), so r > 0 there",
     r"counting\.x_count", r"if \(r\) or True else k"),
    ("equivalent: log(1 / DELTA) / c > 0, so floor(...) + 1 >= 1 and max(0, .) is max(1, .)",
     r"counting\.x__standard_classes", r"n_rot = min\(planes, max\(1, math\.floor"),
    ("equivalent: s < n_rot keeps theta_s >= DELTA, so ratio = DELTA / theta_s <= 1, and ratio = 1 "
     "is a tie (theta_s exactly DELTA) that x = inf and x = -log1p(-1) / c = inf answer alike",
     r"counting\.x__standard_classes", r"(ratio >= 1\) and False|ratio > 1 else|ratio >= 2 else)"),
    ("equivalent: a class longer than the n_rot - s planes left gives runs = 1 and full = 0, and the "
     "last-class branch counts those n_rot - s planes", r"counting\.x__standard_classes",
     r"min\(n_rot \+ s, math\.ceil"),
    ("equivalent: runs only decides full < runs and ends the loop (s += runs * size >= n_rot); the "
     "fractional ceiling (n_rot - s) / size does both as the integer one", r"counting\.x__standard_classes",
     r"-\(-\(n_rot - s\) / size\)"),
    ("diagnostics only: the timings in factors['seconds'] (their keys and range are tested)",
     r"fastrank\.x_structured_rank", r"seconds"),
    ("performance only: factored_is_cheaper's flop model picks between two routes of the same coupled "
     "test (tests/test_fastrank.py checks their bounds agree); a changed model changes the time only",
     r"fastrank\.x_factored_is_cheaper", r"(direct|factored) = |return factored"),
    ("equivalent: at A.shape[0] = A.shape[1] both Gram matrices have the same order and spectrum",
     r"fastrank\.x__norm2", r"A\.shape\[0\] < A\.shape\[1\]"),
    ("equivalent: the Gram matrix G is square, shape[1] is shape[0]", r"fastrank\.x__norm2",
     r"n = G\.shape\[1\]"),
    ("certified either way: the start block's seed and width and the step count change only the "
     "estimate theta, and whatever theta is, the bound returned passes the same Cholesky test (its "
     "1e-4 tightness and its independence of the global seed are tested)", r"fastrank\.x__norm2",
     r"(manual_seed\(1\)|randn\(n, 9,|range\(41\))"),
    ("equivalent: W is H v x d with H v <= d (applicable refuses more), so its U is H v x H v with "
     "or without full_matrices", r"fastrank\.x_structured_rank", r"svd\(W, (\)|full_matrices=True\))"),
    ("equivalent: a cut past the last row or column adds an empty block", r"fastrank\.x_(gram|_coupled_test)",
     r"range\((blocks|GRAM_ROW_BLOCKS) \+ 2\)"),
    ("equivalent: the identity is exact in float32, and einsum and kron promote it to float64",
     r"fastrank\.x_(_group_jacobian_closed|block_gram)", r"torch\.eye\((m|vd|v), (dtype=None)?\)"),
    ("equivalent: keep.nonzero() reads a float mask of ones and zeros as it reads the boolean one",
     r"fastrank\.x_split_block", r"keep = torch\.ones\(P_g, (dtype=None)?\)"),
    ("equivalent: d is assigned but never read in _group_jacobian_closed", r"fastrank\.x__group_jacobian_closed",
     r"vd, d = v\.shape\[-1\], X\.shape\[(\+1|-2)\]"),
    ("performance only: without RoPE, R_s^T q_t = q_t for every key s, and the other branch is the "
     "same sum without the (t, s) expansion", r"fastrank\.x__group_jacobian_closed",
     r'"W_K": scale \* \(torch\.einsum\("bhtsc,bsa,bhtse->bhtcae", AD, Xc, Rq\) if \(sub\.rotary_dim\) or True else'),
    ("equivalent today (a known defect): s >= 0 differs only at sigma_min(Z') = 0 exactly (a value "
     "column that is zero), where the route fails either way, in the lift's Cholesky factorisation "
     "(LinAlgError) instead of reporting no certificate", r"fastrank\.x_structured_rank",
     r"elif a > 0 and s >= 0:"),
    ("equivalent: replace keeps an explicit value_dim, and a derived one is head_dim, which is passed",
     r"fastrank\.x_group_config", r"^\s*\)$"),
    ("equivalent: S holds the P_g >= 1 eigenvalues of the block's Gram matrix, so it is never empty",
     r"fastrank\.x_structured_rank", r"S\[0\]\.item\(\) if (\(S\.numel\(\)\) or True|S\.numel\(\)) else (0|1)\.0"),
    ("equivalent: structured_rank refuses H v > d (applicable, its first lines), so H v <= d and "
     "H / v <= d hold and the else branch is never taken", r"fastrank\.x_structured_rank",
     r"s_min_W = s_W\.min\(\)\.item\(\) if (\(H \* v <= d\) or True|H / v <= d|H \* v <= d) else"),
    ("equivalent: never reached, u >= 1 for every layer: scaling a group's queries by c and its keys "
     "by 1 / c (biases with them) moves no output, so every block K_g has a kernel",
     r"fastrank\.x_structured_rank", r"(kernel_sv = (None|torch\.zeros\()|sigma_next = (None|1\.0)$)"),
    ("equivalent: a column of ones is exact in float32, and torch.cat promotes it to float64",
     r"fastrank\.x_structured_rank", r"torch\.ones\(B \* n, 1, (dtype=None)?\)"),
]


CORE = ("attention", "certify", "counting", "fastrank", "rank", "symmetry")
RECORD = OUT / "mutation.json"       # the previous report: modules this run did not mutate come from it


def results(mutants: Path, rechecked: dict[str, bool]) -> dict[str, str]:
    """mutant name -> status, from mutmut's result files under ``mutants`` (none where nothing ran)."""
    out = {}
    for meta in sorted(mutants.glob("idlib/**/*.meta")):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            out[name] = STATUS.get(code, "suspicious")
            if out[name] == "survived" and rechecked.get(name):
                out[name] = "killed"
    return out


def diff(name: str, root: Path) -> list[str]:
    """The changed lines of one mutant (``mutmut show`` where mutmut ran), '-' original and '+' mutated."""
    text = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=root, text=True,
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


def score_text(counts: dict[str, int]) -> str:
    """(killed + timeout) / (killed + timeout + survived) as a percentage, '-' when none was judged."""
    judged = counts.get("killed", 0) + counts.get("timeout", 0) + counts.get("survived", 0)
    return f"{(judged - counts.get('survived', 0)) / judged:.1%}" if judged else "-"


def kind_of(reason: str | None) -> str:
    """'equivalent', 'performance only', ... (a rule's reason up to its colon); 'not explained'."""
    return reason.split(":")[0] if reason else "not explained"


def module_of(name: str) -> str:
    return name.split(".")[1]


def sources_unchanged(module: str, commit: str) -> bool:
    """idlib/MODULE.py in the working tree is what it was at ``commit``."""
    return subprocess.run(["git", "diff", "--quiet", commit, "--", f"idlib/{module}.py"],
                          cwd=REPO).returncode == 0


def carried(record: dict, modules: list[str], rechecked: dict[str, bool]
            ) -> tuple[dict[str, Counter], list[dict], dict[str, str]]:
    """MODULES' counts and survivors from the previous report, their sources unchanged since the
    commit it names for each (else this script stops): a survivor RECHECKED killed counts as
    killed, the others are explained again by today's RULES."""
    per_module: dict[str, Counter] = {}
    survivors, sources = [], {}
    for m in modules:
        commit = record["summary"]["sources_of"][m]
        if not sources_unchanged(m, commit):
            raise SystemExit(f"mutation_report: idlib/{m}.py changed since its mutants were run "
                             f"({commit[:10]}); mutate it again (make mutation MODULES={m})")
        counts = Counter(record["summary"]["modules"][m])
        for s in record["survivors"]:
            if module_of(s["mutant"]) != m:
                continue
            if rechecked.get(s["mutant"]):
                counts["survived"] -= 1
                counts["killed"] += 1
            else:
                survivors.append({"mutant": s["mutant"], "diff": s["diff"],
                                  "reason": explain(s["mutant"], s["diff"])})
        per_module[m], sources[m] = counts, commit
    return per_module, survivors, sources


def main(argv: list[str]) -> int:
    """argv: [ROOT (where mutmut ran, mutants/ in it; default the repository) [RECHECKED.json
    (survivors re-run against tests added since: name -> killed)]]."""
    root = Path(argv[0]) if argv else REPO
    rechecked = json.loads(Path(argv[1]).read_text()) if len(argv) > 1 else {}
    status = results(root / "mutants", rechecked)
    reached = {module_of(n) for n, st in status.items() if st != "not checked"}
    status = {n: st for n, st in status.items() if module_of(n) in reached}   # the others: carried
    stats = root / "mutants" / "mutmut-stats.json"
    commit = json.loads(stats.read_text()).get("git_commit") or "?" if stats.exists() else "?"
    per_module: dict[str, Counter] = defaultdict(Counter)
    survivors = []
    for name, st in sorted(status.items()):
        per_module[module_of(name)][st] += 1
        if st == "survived":
            lines = diff(name, root)
            survivors.append({"mutant": name, "diff": lines, "reason": explain(name, lines)})
    sources = {m: commit for m in per_module}
    rest = [m for m in CORE if m not in per_module]
    if rest:
        if not RECORD.exists():
            print(f"mutation_report: no results for {', '.join(rest)} (run make mutation)")
            return 1
        record = json.loads(RECORD.read_text())
        more, more_survivors, more_sources = carried(record, rest, rechecked)
        earlier_kills = {n: True for n in record["summary"]["killed_by_tests_added_after_the_run"]
                         if module_of(n) in rest}
        rechecked = {**earlier_kills, **rechecked}
        per_module.update(more)
        survivors += more_survivors
        sources.update(more_sources)
    total = Counter()
    for c in per_module.values():
        total.update(c)
    detected = total["killed"] + total["timeout"]
    judged = detected + total["survived"]
    summary = {"modules": {m: dict(c) for m, c in sorted(per_module.items())}, "total": dict(total),
               "score": detected / judged if judged else None, "sources_of": sources,
               "killed_by_tests_added_after_the_run": sorted(n for n, k in rechecked.items() if k),
               "explained": sum(s["reason"] is not None for s in survivors),
               "unexplained": [s["mutant"] for s in survivors if s["reason"] is None]}
    survivors.sort(key=lambda s: s["mutant"])
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "mutation.json").write_text(json.dumps({"summary": summary, "survivors": survivors}, indent=1))
    fresh = sorted(m for m in per_module if sources[m] == commit and m not in rest)
    head = (f"mutmut 3.8.1 over the sources and tests of commit {commit[:10]} for "
            f"{', '.join(fresh)}" if fresh else "No module mutated in this run")
    if rest:
        head += ("; " if fresh else ": ") + (
            f"{', '.join(rest)} from earlier runs over the same sources (commit in the table)")
    if rechecked:
        head += ", survivors re-run against the tests of today (benchmarks/mutation_recheck.py)"
    lines = ["# Mutation score of idlib's core", "", head + ".", "",
             "| module | sources of | mutants | killed | timeout | survived | no tests | not checked | score |",
             "| :-- | :-- | --: | --: | --: | --: | --: | --: | --: |"]
    for m, c in sorted(per_module.items()):
        lines.append(f"| {m} | {sources[m][:10]} | {sum(c.values())} | {c['killed']} | "
                     f"{c['timeout']} | {c['survived']} | {c['no tests']} | {c['not checked']} | "
                     f"{score_text(c)} |")
    lines.append(f"| all | | {sum(total.values())} | {total['killed']} | {total['timeout']} | "
                 f"{total['survived']} | {total['no tests']} | {total['not checked']} | "
                 f"{score_text(total)} |")
    lines += ["", "score = (killed + timeout) / (killed + timeout + survived); *not checked*: "
              "mutants the run did not reach.", ""]
    if total["not checked"]:
        waiting = Counter(n.split("__mutmut_")[0].replace(".x_", ".", 1)
                          for n, st in status.items() if st == "not checked")
        top = ", ".join(f"`{f}` {k}" for f, k in waiting.most_common(3))
        lines += ["A run was stopped before it reached every mutant. mutmut takes them in order of "
                  "the estimated time of their tests, fastest first, so the mutants not checked are "
                  "those behind the slowest tests" + (f" (this run's: {top})" if top else "") +
                  ": the score over the judged mutants is not the score of the module.", ""]
    if rechecked:
        lines += [f"{len(summary['killed_by_tests_added_after_the_run'])} survivors are killed by "
                  "tests added after their run (re-run against them; counted as killed).", ""]
    lines += ["## Survivors, by reason", ""]
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
    sys.exit(main(sys.argv[1:]))
