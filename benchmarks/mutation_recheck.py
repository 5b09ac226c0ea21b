"""Re-run an earlier mutation run's survivors against the current tests, for core modules whose
sources have not changed since that run (``make mutation`` then mutates only the others).

    python benchmarks/mutation_recheck.py RECORD OUT.json [--killed PREVIOUS.json] [--all] MODULE...
                                          [--only MUTANT...]

RECORD is the report of the earlier run (``benchmarks/results/mutation.json``): its survivors
carry their diffs (the original lines and the mutated ones, as ``mutmut show`` printed them).
For each MODULE (its sources unchanged since the commit the record names for it, checked with
git) the current tests of that module (``TESTS``) run once in a scratch copy of the working tree
with no mutant (they must pass), then once per survivor with the survivor's mutated lines put
in place of the original ones inside its function; a failing run kills it.  By default only the
survivors no rule of ``mutation_report.RULES`` explains are re-run (``--all``: every survivor;
``--only``: the named ones);
mutants PREVIOUS.json found killed stay killed.  Writes {mutant: killed} to OUT.json, the second
argument of ``mutation_report.py``.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

TESTS = {
    "attention": ["tests/test_forward.py", "tests/test_project_norms.py", "tests/test_variants.py"],
    "certify": ["tests/test_certify.py", "tests/test_rank_rules.py"],
    "counting": ["tests/test_counting.py", "tests/test_derived_rules.py", "tests/test_census_frequencies.py"],
    "fastrank": ["tests/test_fastrank.py", "tests/test_rank_rules.py"],
    "rank": ["tests/test_rank.py", "tests/test_rank_rules.py", "tests/test_certify.py", "tests/test_sweep.py"],
    "symmetry": ["tests/test_symmetry.py"],
}


class DiffError(ValueError):
    pass


def _mangled(mutant: str) -> list[str]:
    """mutmut's name of the mutated function, split: ['x__standard_classes'] for a function,
    ['x', 'FactoredRows', 'to'] for a method."""
    return mutant.split(".")[-1].split("__mutmut_")[0].split("\u01c1")


def function_name(mutant: str) -> str:
    """'idlib.counting.x__standard_classes__mutmut_3' -> '_standard_classes'; a method's,
    'idlib.fastrank.x\u01c1FactoredRows\u01c1to__mutmut_5' -> 'to'."""
    parts = _mangled(mutant)
    return parts[-1] if len(parts) == 3 else parts[0][2:]


def apply_mutant(source: str, mutant: str, diff: list[str]) -> str:
    """``source`` with the survivor's '-' lines replaced by its '+' lines inside its function."""
    old = [line[1:] for line in diff if line.startswith("-")]
    new = [line[1:] for line in diff if line.startswith("+")]
    lines = source.split("\n")
    name = function_name(mutant)
    owner = _mangled(mutant)
    first = next((i for i, line in enumerate(lines) if line.startswith(f"class {owner[1]}")), 0) \
        if len(owner) == 3 else 0
    start = next((i for i, line in enumerate(lines) if i >= first
                  and line.lstrip().startswith(f"def {name}(")), None)
    if start is None:
        raise DiffError(f"{mutant}: no function {name}")
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip()
                and len(lines[i]) - len(lines[i].lstrip()) <= indent
                and not lines[i].lstrip().startswith((")", "#"))), len(lines))
    pad = " " * indent                     # mutmut shows a method dedented to its class
    for o, n in ((old, new), ([pad + x for x in old], [pad + x for x in new])):
        for i in range(start, end - len(o) + 1):
            if lines[i:i + len(o)] == o:
                return "\n".join(lines[:i] + n + lines[i + len(o):])
    raise DiffError(f"{mutant}: its original lines are not in {name}")


def run_tests(tree: Path, files: list[str]) -> int:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
           "-W", "ignore", *files]
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True).returncode


def scratch_copy(dest: Path) -> None:
    """The working tree's tracked and untracked, not ignored files (what a commit would hold)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, capture_output=True, text=True, check=True).stdout.split("\0")
    for f in filter(None, files):
        if (REPO / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, dest / f)


def main(argv: list[str]) -> int:
    from mutation_report import explain, module_of, sources_unchanged
    record, out, rest = Path(argv[0]), Path(argv[1]), argv[2:]
    previous = {}
    if rest[:1] == ["--killed"]:
        previous, rest = json.loads(Path(rest[1]).read_text()), rest[2:]
    only = None
    if "--only" in rest:
        only, rest = set(rest[rest.index("--only") + 1:]), rest[:rest.index("--only")]
    every = "--all" in rest
    modules = [m for m in rest if m != "--all"]
    rec = json.loads(record.read_text())
    sources_of = rec["summary"]["sources_of"]
    results = dict(previous)
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        scratch_copy(tree)
        for module in modules:
            if not sources_unchanged(module, sources_of[module]):
                print(f"{module}: idlib/{module}.py changed since {sources_of[module][:10]}; mutate it again")
                return 1
            survivors = [s for s in rec["survivors"] if module_of(s["mutant"]) == module
                         and (every or explain(s["mutant"], s["diff"]) is None)
                         and (only is None or s["mutant"] in only)]
            if run_tests(tree, TESTS[module]) != 0:
                print(f"{module}: the current tests fail with no mutant; not rechecked")
                return 1
            path = tree / "idlib" / f"{module}.py"
            original = path.read_text()
            for i, s in enumerate(survivors):
                name = s["mutant"]
                if previous.get(name):
                    continue
                path.write_text(apply_mutant(original, name, s["diff"]))
                try:
                    results[name] = run_tests(tree, TESTS[module]) not in (0, 5)
                finally:
                    path.write_text(original)
                print(f"{module} {i + 1}/{len(survivors)} {name}: "
                      f"{'killed' if results[name] else 'survived'}", flush=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"{sum(results.values())} of {len(results)} survivors killed by the current tests")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
