"""idlib.report.checks: the helpers the chapters share."""
import pytest
import torch

from idlib.report.checks import divisors, max_rel, wrapped


def test_max_rel_is_relative_to_the_largest_entry_of_old():
    old = torch.tensor([[1.0, -4.0], [2.0, 0.5]], dtype=torch.float64)
    new = old + torch.tensor([[0.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    assert max_rel(new, old) == 0.25
    assert max_rel(old, old) == 0.0
    with pytest.raises(ValueError, match="zero"):
        max_rel(new, torch.zeros(2, 2))


def test_divisors():
    assert divisors(1) == [1]
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(7) == [1, 7]
    for bad in (0, -4, 2.0, True):
        with pytest.raises(ValueError, match="positive integer"):
            divisors(bad)


def test_wrapped_keeps_every_line_within_the_width():
    text = "5 of 5 configurations: measured rank = closed form; 5 of 5 certified (gap >= 1e4); smallest gap > 1e8"
    lines = wrapped(text, 40).split("\n")
    assert len(lines) == 3 and all(len(line) <= 40 for line in lines)
    assert lines[1].startswith("  ") and " ".join(x.strip() for x in lines) == text
    assert wrapped("short") == "short"
