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
