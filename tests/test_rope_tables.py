"""Chapter 4's study helpers and tables: the frequency cases, the increase of the commutant by
the three rules of thm-rope-group, the captioned tables, and the starved measurement that
bounds the appendix's theorem (a certified rank below P - U on too few sequences)."""
import math

import pytest
import torch

from idlib import AttentionConfig, count
from idlib.attention import rope_frequencies
from idlib.counting import rope_commutant_dim
from idlib.rank import measure
from idlib.report import rope as rope_tables
from idlib.studies import rope as rs
from idlib.symmetry import commutant_basis, rotation_matrix


def test_frequency_cases_break_condition_f_as_named():
    omega = rope_frequencies(AttentionConfig(8, rope_fraction=1.0))
    cases = rs.frequency_cases(omega)
    assert list(cases) == list(rs.FREQUENCY_CASES)
    assert [rs.frequency_condition(f) for f in cases.values()] == [True] + [False] * 7
    assert cases["reflected"][1].item() == pytest.approx(2 * math.pi - omega[0].item())
    assert torch.equal(cases["default"], omega) and cases["default"] is not omega
    with pytest.raises(ValueError, match="at least 3 frequencies"):
        rs.frequency_cases(omega[:2])


@pytest.mark.parametrize("d_model, fraction, changes, increase", [
    (8, 1.0, [], 0),
    (8, 1.0, [(1, 1.0)], 4),                       # one pair merged: 2 nu (nu - 1) = 4
    (8, 1.0, [(1, 1.0), (2, 1.0), (3, 1.0)], 24),  # all four planes: 2 * 4 * 3
    (8, 0.5, [(1, 0.0)], 18),                      # a zero plane next to 4 pass dims
    (12, 1.0, [(1, 0.0), (2, 0.0)], 12),           # two zero planes: nu_+ = 4, 16 - 4
    (12, 1.0, [(1, math.pi), (2, math.pi)], 12),   # two pi planes: nu_- = 4, 16 - 4
])
def test_commutant_increase_matches_the_numerical_commutant(d_model, fraction, changes,
                                                            increase):
    c = AttentionConfig(d_model, rope_fraction=fraction)
    f = rope_frequencies(c).clone()
    for i, value in changes:
        f[i] = value
    k, r = c.head_dim, c.rotary_dim
    assert rs.commutant_increase(f, k - r) == increase
    numeric = commutant_basis(rotation_matrix(c, 1.0, f)).shape[0]
    assert numeric == rope_commutant_dim(f, k - r) == r + (k - r) ** 2 + increase


def test_tables_are_captioned_and_labelled():
    table = rope_tables.identities({"product": 0.0, "scores": 1.0}, range(-2, 3), 5)
    assert table.startswith(":::{table} The identities of the rotation")
    assert ":name: tab-rope-identities" in table and "offsets $i, j$ from -2 to 2" in table
    assert "| $R(i) R(j) = R(i + j)$ | < 1e-12 |" in table
    assert "| $q_i \\kappa_j^\\top = x_i M(i-j) x_j^\\top$ | 1.0e+00 |" in table
    table = rope_tables.commutant([[0, 4, 16, 16, 16]], 4)
    assert ":name: tab-rope-commutant" in table and "$k = 4$" in table
    assert table.rstrip().endswith(":::")


def test_too_few_sequences_give_a_certified_rank_below_the_count():
    """Chapter 4's starved run: one fully rotated head, d = 8, 25 sequences of 2 tokens
    (no mask). The softmax passes 2 numbers per sequence, so U >= 192 - 50 = 142 although
    the count is 72; the cut is certified all the same (thm-sweep-one-point is stated for
    batches of the certified shape or larger because of this)."""
    c = AttentionConfig(8, rope_fraction=1.0)
    m = measure(c, seed=0, seq_len=2, n_sequences=25)
    assert count(c).unidentified == 72
    assert m.unidentified == 142 and m.certified
    assert measure(c, seed=0, seq_len=2, n_sequences=97).unidentified == 72
