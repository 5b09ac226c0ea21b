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
    text = ("5 of 5 configurations: measured rank = closed form; 5 of 5 certified (gap >= 1e4); "
            "smallest gap > 1e8")
    assert wrapped(text, 60).split("\n") == [
        "5 of 5 configurations: measured rank = closed form;",
        "5 of 5 certified (gap >= 1e4); smallest gap > 1e8"]
    lines = wrapped("a b c d e f g h i j k l m n o p q r s t u v w x y z", 10).split("\n")
    assert all(len(line) <= 10 for line in lines) and lines[1].startswith("  ")
    assert wrapped("short") == "short"
    assert wrapped("one; two", 80) == "one; two"


def test_config_fields_rule():
    from idlib.report.checks import CONFIG_FIELDS
    assert CONFIG_FIELDS.holds({"d_model": 8, "n_heads": 2})
    assert not CONFIG_FIELDS.holds([("d_model", 8)]) and not CONFIG_FIELDS.holds({1: 2})


def test_captioned_table_is_a_colon_fenced_myst_table():
    from idlib.report.tables import captioned, markdown_table
    table = markdown_table(["$d$", "$U/P$"], [[4, "50.00%"]])
    text = captioned(table, "Caption with {prf:ref}`thm-x` and $k = v$.", "tab-x")
    lines = text.split("\n")
    assert lines[0] == ":::{table} Caption with {prf:ref}`thm-x` and $k = v$."
    assert lines[1:3] == [":name: tab-x", ":align: center"] and lines[-1] == ":::"
    assert "\n".join(lines[4:-1]) == table
    assert ":name:" not in captioned(table, "No label.")
