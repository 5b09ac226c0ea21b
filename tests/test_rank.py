"""The rank rule and the gap: what the certificate is made of, and that it does not depend on
round-off (whose digits change from one CPU, BLAS build or thread count to another)."""
import math

import pytest
import torch

from idlib import AttentionConfig, count
from idlib.studies import rope as rs
from idlib.rank import (CERTIFY_GAP, CERTIFY_GAP_TEXT, format_gap, measure, rank_from_singular_values,
                        roundoff_tolerance)
from idlib.symmetry import rotation_matrix
from idlib.report.tables import compare, format_roundoff, summary

EPS = torch.finfo(torch.float64).eps


def test_tolerance_is_matrix_rank_convention():
    assert roundoff_tolerance(2.0, (300, 100)) == 2.0 * 300 * EPS
    A = torch.randn(60, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    A = A @ torch.diag(torch.tensor([1.0] * 12 + [0.0] * 8, dtype=torch.float64))
    r, gap = rank_from_singular_values(torch.linalg.svdvals(A), tuple(A.shape))
    assert r == int(torch.linalg.matrix_rank(A)) == 12
    assert gap > 1e10


def test_gap_is_sigma_r_over_tolerance_and_ignores_round_off():
    sv = torch.tensor([4.0, 2.0, 1e-3, 3e-17, 1e-18], dtype=torch.float64)
    shape = (100, 5)
    tau = 4.0 * 100 * EPS
    r, gap = rank_from_singular_values(sv, shape)
    assert r == 3 and gap == 1e-3 / tau
    # the singular values below tau are round-off: multiplying them by 3 (as another CPU
    # might) leaves rank and gap exactly as they were
    noisy = sv.clone()
    noisy[3:] *= 3
    assert rank_from_singular_values(noisy, shape) == (r, gap)
    # order of the input does not matter
    assert rank_from_singular_values(sv.flip(0), shape) == (r, gap)


def test_full_rank_has_a_finite_gap_and_zero_matrix_is_rank_0():
    sv = torch.tensor([1.0, 0.5, 1e-6], dtype=torch.float64)
    r, gap = rank_from_singular_values(sv, (10, 3))
    assert r == 3 and gap == pytest.approx(1e-6 / (10 * EPS), rel=1e-15)
    assert rank_from_singular_values(torch.zeros(4, dtype=torch.float64), (4, 4)) == (0, math.inf)
    assert rank_from_singular_values(torch.zeros(0, dtype=torch.float64), (0, 0)) == (0, math.inf)


def test_a_singular_value_just_above_round_off_is_not_certified():
    tau = 1.0 * 10 * EPS
    sv = torch.tensor([1.0, 0.3, 50 * tau, 0.1 * tau], dtype=torch.float64)
    r, gap = rank_from_singular_values(sv, (10, 4))
    assert r == 3 and gap == pytest.approx(50, rel=1e-12) and gap < CERTIFY_GAP


def test_format_gap_and_roundoff():
    assert format_gap(math.inf) == "inf"
    assert format_gap(3.2e4) == "1e4-1e5"
    assert format_gap(9.99e3) == "1e3-1e4"
    assert format_gap(2e9) == "> 1e8"
    assert format_roundoff(3.4e-15) == "< 1e-12"
    assert format_roundoff(-3.4e-15) == "< 1e-12"
    assert format_roundoff(2.5e-3) == "2.5e-03"
    assert format_roundoff(2.5e-3, digits=2) == "2.50e-03"
    assert CERTIFY_GAP_TEXT == "1e4"


def test_summary_line_names_the_threshold_and_counts():
    comparisons = [compare(AttentionConfig(4, 2)), compare(AttentionConfig(4, 1, bias="qkvo"))]
    line = summary(comparisons)
    assert line.startswith("2 of 2 configurations: measured rank = closed form; 2 of 2 certified")
    assert "(gap >= 1e4)" in line


def test_measurement_gap_does_not_depend_on_thread_count():
    c = AttentionConfig(8, 2, bias="qkvo", rope_fraction=1.0)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a = measure(c, seed=1, method="dense")
        torch.set_num_threads(2)
        b = measure(c, seed=1, method="dense")
    finally:
        torch.set_num_threads(before)
    assert a.rank == b.rank == count(c).identified
    assert a.certified and b.certified
    assert abs(a.gap / b.gap - 1) < 1e-10
    sv = a.singular_values
    assert a.gap == sv[a.rank - 1].item() / roundoff_tolerance(sv[0].item(), (a.n_rows, a.n_params))


def test_random_commutant_commutes_and_does_not_depend_on_the_basis(monkeypatch):
    # head_dim 6, frequencies (0.3, 0.3, 1.1): commutant gl(2, C) x C, real dimension 8 + 2
    R = rotation_matrix(AttentionConfig(6, 1, rope_fraction=1.0),
                        frequencies=torch.tensor([0.3, 0.3, 1.1], dtype=torch.float64))
    M = rs.random_commutant(R, seed=4)
    assert torch.linalg.matrix_norm(M @ R - R @ M) < 1e-12
    assert abs(torch.linalg.det(M).item()) > 1e-3
    # another orthonormal basis of the same space (as another CPU's SVD may return) gives
    # the same matrix: the draw is a projection, not coefficients on a basis
    basis = rs.commutant_basis(R)
    c = basis.shape[0]
    assert c == 10
    Q = torch.linalg.qr(torch.randn(c, c, dtype=torch.float64,
                                    generator=torch.Generator().manual_seed(9)))[0]
    rotated = torch.einsum("ab,bij->aij", Q, basis)
    monkeypatch.setattr(rs, "commutant_basis", lambda _: rotated)
    assert torch.allclose(rs.random_commutant(R, seed=4), M, rtol=0, atol=1e-12)
    assert not torch.allclose(rs.random_commutant(R, seed=5), M, atol=1e-3)


def test_jacobian_takes_every_sequence_in_chunks():
    """70 sequences of 3 tokens: two chunks of at most 64; every row is the layer's own."""
    from idlib.attention import forward, init_params, random_inputs
    from idlib.rank import jacobian
    config = AttentionConfig(d_model=2, n_heads=1)
    p = init_params(config, 0)
    X = random_inputs(config, 70, 3, 0)
    J = jacobian(config, p, X)
    assert J.shape == (70 * 3 * 2, 16)
    last = jacobian(config, p, X[-1:])
    assert torch.allclose(J[-6:], last, rtol=0, atol=1e-14)
