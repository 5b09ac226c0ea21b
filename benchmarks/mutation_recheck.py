"""Re-run an earlier mutmut run's survivors against the current tests (``make mutation`` after a
change that left some core modules' sources untouched).

    python benchmarks/mutation_recheck.py ROOT OLD_MUTANTS OUT.json [--killed PREVIOUS.json] MODULE...

ROOT is a mutmut run over the current commit (its ``mutants/`` tree); OLD_MUTANTS the
``mutants/`` tree of a run over a commit where MODULE's sources were the same as now (checked:
the mutated file's trampolines carry the original functions, so its unmutated behaviour is the
current one).  For each MODULE the old mutated source and its results (``.meta``) are copied
into ROOT's tree, the current tests of that module (``TESTS``) are first run with no mutant
active (they must pass), then once per old survivor with ``MUTANT_UNDER_TEST`` set; a failing
run kills it (mutants a previous recheck, PREVIOUS.json, found killed stay killed and are not
re-run).  Writes {mutant: killed} to OUT.json (the second argument of
``mutation_report.py``) and ROOT/mutants/earlier.json ({module: old commit}).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = {
    "attention": ["tests/test_forward.py", "tests/test_project_norms.py", "tests/test_variants.py"],
    "certify": ["tests/test_certify.py", "tests/test_rank_rules.py"],
    "rank": ["tests/test_rank.py", "tests/test_rank_rules.py", "tests/test_certify.py", "tests/test_sweep.py"],
    "symmetry": ["tests/test_symmetry.py"],
}


def run_tests(tree: Path, files: list[str], mutant: str) -> int:
    env = dict(os.environ, MUTANT_UNDER_TEST=mutant, PYTHONPATH=str(tree))
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
           "-W", "ignore", *files]
    return subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True).returncode


def main() -> int:
    root, old, out, rest = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:]
    previous = {}
    if rest[:1] == ["--killed"]:
        previous, rest = json.loads(Path(rest[1]).read_text()), rest[2:]
    modules = rest
    tree = root / "mutants"
    old_stats = json.loads((old / "mutmut-stats.json").read_text()) if (old / "mutmut-stats.json").exists() else {}
    old_commit = old_stats.get("git_commit", "earlier")
    results, earlier = {}, {}
    for module in modules:
        for suffix in (".py", ".py.meta", ".py.spans"):
            src = old / "idlib" / f"{module}{suffix}"
            if src.exists():
                shutil.copy(src, tree / "idlib" / f"{module}{suffix}")
        meta = json.loads((tree / "idlib" / f"{module}.py.meta").read_text())
        survivors = [k for k, v in meta["exit_code_by_key"].items() if v == 0]
        if run_tests(tree, TESTS[module], "") != 0:
            print(f"{module}: the current tests fail with no mutant active; not rechecked")
            return 1
        for i, name in enumerate(survivors):
            if previous.get(name):
                results[name] = True
                continue
            results[name] = run_tests(tree, TESTS[module], name) not in (0, 5)
            print(f"{module} {i + 1}/{len(survivors)} {name}: "
                  f"{'killed' if results[name] else 'survived'}", flush=True)
        earlier[module] = old_commit
    out.write_text(json.dumps(results, indent=1))
    (tree / "earlier.json").write_text(json.dumps(earlier))
    print(f"{sum(results.values())} of {len(results)} survivors killed by the current tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
