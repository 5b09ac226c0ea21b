"""benchmarks/mutation_recheck.py puts a recorded survivor back into its function (mutation report)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from mutation_recheck import DiffError, apply_mutant, function_name  # noqa: E402

SOURCE = '''def f(x):
    return x + 1


def _g(x):
    y = x + 1
    return (y,
            x + 1)
'''


def test_function_name():
    assert function_name("idlib.counting.x__standard_classes__mutmut_3") == "_standard_classes"
    assert function_name("idlib.fastrank.x_structured_rank__mutmut_404") == "structured_rank"
    assert function_name("idlib.fastrank.x\u01c1FactoredRows\u01c1to__mutmut_5") == "to"


def test_the_mutated_lines_replace_the_original_ones_in_their_function_only():
    out = apply_mutant(SOURCE, "idlib.m.x__g__mutmut_1", ["-            x + 1)", "+            x - 1)"])
    assert out == SOURCE.replace("            x + 1)", "            x - 1)")
    out = apply_mutant(SOURCE, "idlib.m.x__g__mutmut_2", ["-    y = x + 1", "+    y = x + 2"])
    assert out.splitlines()[1] == "    return x + 1" and "    y = x + 2" in out
    out = apply_mutant(SOURCE, "idlib.m.x__g__mutmut_3", ["-    return (y,", "-            x + 1)",
                                                          "+    return (y,", "+            x * 1)"])
    assert out.endswith("    return (y,\n            x * 1)\n")


def test_a_diff_that_is_not_there_is_refused():
    with pytest.raises(DiffError, match="its original lines are not in f"):
        apply_mutant(SOURCE, "idlib.m.x_f__mutmut_1", ["-    y = x + 1", "+    y = x + 2"])
    with pytest.raises(DiffError, match="no function h"):
        apply_mutant(SOURCE, "idlib.m.x_h__mutmut_1", ["-    y = x + 1", "+    y = x + 2"])


def test_the_books_mutation_table_counts_timeouts_as_killed_and_sorts_survivors_by_kind(tmp_path):
    """benchmarks/report.py's table for the reproducibility page, from a mutation.json: score =
    (killed + timeout) / (killed + timeout + survived); 'no tests' and 'not checked' left out."""
    import json
    from report import mutation_md
    from mutation_report import kind_of, score_text
    assert score_text({"killed": 7, "timeout": 1, "survived": 2, "not checked": 90}) == "80.0%"
    assert score_text({"not checked": 3}) == "-"
    assert kind_of("equivalent: R is square") == "equivalent" and kind_of(None) == "not explained"
    record = {"summary": {"modules": {"rank": {"killed": 7, "timeout": 1, "survived": 2, "no tests": 4},
                                      "counting": {"killed": 1000, "not checked": 5}},
                          "total": {"killed": 1007, "timeout": 1, "survived": 2, "no tests": 4, "not checked": 5},
                          "sources_of": {"rank": "abcdef1234", "counting": "0123456789"}},
              "survivors": [{"mutant": "a", "reason": "equivalent: x"}, {"mutant": "b", "reason": None}]}
    (tmp_path / "mutation.json").write_text(json.dumps(record))
    lines = mutation_md(tmp_path / "mutation.json").splitlines()
    assert "| `counting` | `0123456` | 1,005 | 1,000 | 0 | 5 | 100.0% |" in lines
    assert "| `rank` | `abcdef1` | 14 | 8 | 2 | 0 | 80.0% |" in lines
    assert "| all | | 1,019 | 1,008 | 2 | 5 | **99.8%** |" in lines
    assert lines[-1].endswith("The 2 survivors: equivalent 1, not explained 1.")
    assert "has not been made yet" in mutation_md(tmp_path / "missing.json")
