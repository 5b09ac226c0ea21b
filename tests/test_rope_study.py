"""idlib.studies.rope: the group actions of chapters 4 and 5 on real tensors, the frequency
condition, and the multi-seed record.

The invariance tests assert the values the chapters rely on: the theorem's move leaves the
output unchanged to 1e-10, and the same move with B (or A^T) in place of B^{-1} (or A^{-T})
changes it by more than 1e-3, so a wrong action cannot pass."""
import math

import pytest
import torch

from idlib import AttentionConfig, count, init_params, random_inputs
from idlib.attention import rope_frequencies
from idlib.rank import default_seq_len
from idlib.studies import rope as rs
from idlib.symmetry import rotation_matrix

GQA = AttentionConfig(8, 4, n_kv_heads=2)                # m = 2 heads per group, k = v = 2
ROPE = AttentionConfig(8, 2, n_kv_heads=1, rope_fraction=1.0)


def _setup(config, seed=0):
    params = init_params(config, seed)
    X = random_inputs(config, 4, default_seq_len(config), seed)
    return params, X


def _per_head(config, mats):
    return [mats[h // config.group_size] for h in range(config.n_heads)]


def test_act_vo_is_the_symmetry_and_b_not_b_inverse_breaks_it():
    params, X = _setup(GQA)
    B = [rs.random_gl(GQA.value_dim, 11 + g) for g in range(GQA.n_kv_heads)]
    moved = rs.act_vo(GQA, params, B, _per_head(GQA, B))
    for h in range(GQA.n_heads):                     # W_O^h -> B_g^{-1} W_O^h, exactly
        expected = torch.linalg.inv(B[h // GQA.group_size]) @ params["W_O"][h]
        assert torch.allclose(moved["W_O"][h], expected, rtol=0, atol=1e-12)
    assert torch.allclose(moved["W_V"][1], params["W_V"][1] @ B[1], rtol=0, atol=1e-12)
    assert (moved["W_O"] - params["W_O"]).abs().max() > 0.1 * params["W_O"].abs().max()
    assert rs.output_change(GQA, params, moved, X) < 1e-10
    wrong = dict(moved, W_O=torch.stack([B[h // GQA.group_size] @ params["W_O"][h]
                                         for h in range(GQA.n_heads)]))
    assert rs.output_change(GQA, params, wrong, X) > 1e-3


def test_act_qk_is_the_symmetry_and_a_transpose_breaks_it():
    params, X = _setup(GQA)
    A = [rs.random_gl(GQA.head_dim, 1 + g) for g in range(GQA.n_kv_heads)]
    moved = rs.act_qk(GQA, params, _per_head(GQA, A), A)
    assert torch.allclose(moved["W_K"][0], params["W_K"][0] @ torch.linalg.inv(A[0]).T,
                          rtol=0, atol=1e-12)
    assert torch.allclose(moved["W_Q"][3], params["W_Q"][3] @ A[1], rtol=0, atol=1e-12)
    assert rs.output_change(GQA, params, moved, X) < 1e-10
    wrong = dict(moved, W_K=torch.stack([params["W_K"][g] @ A[g].T for g in range(2)]))
    assert rs.output_change(GQA, params, wrong, X) > 1e-3


def test_one_head_of_a_group_moved_alone_changes_the_output():
    params, X = _setup(GQA)
    A = [rs.random_gl(GQA.head_dim, 1 + g) for g in range(GQA.n_kv_heads)]
    split = _per_head(GQA, A)
    split[0] = rs.random_gl(GQA.head_dim, 21)
    assert rs.output_change(GQA, params, rs.act_qk(GQA, params, split, A), X) > 1e-3
    B = [rs.random_gl(GQA.value_dim, 11 + g) for g in range(GQA.n_kv_heads)]
    split_b = _per_head(GQA, B)
    split_b[1] = rs.random_gl(GQA.value_dim, 22)
    assert rs.output_change(GQA, params, rs.act_vo(GQA, params, B, split_b), X) > 1e-3


def test_rope_keeps_the_commutant_and_breaks_generic_matrices():
    params, X = _setup(ROPE)
    R1 = rotation_matrix(ROPE, 1.0)
    A = rs.random_commutant(R1, 3, scale=2.0)
    assert (A @ R1 - R1 @ A).abs().max() < 1e-10
    assert (A - torch.eye(ROPE.head_dim, dtype=A.dtype)).abs().max() > 0.1
    assert rs.output_change(ROPE, params, rs.act_qk(ROPE, params, [A, A], [A]), X) < 1e-10
    G = rs.random_gl(ROPE.head_dim, 3)
    assert rs.output_change(ROPE, params, rs.act_qk(ROPE, params, [G, G], [G]), X) > 1e-3
    plain = ROPE.replace(rope_fraction=0.0)
    assert rs.output_change(plain, params, rs.act_qk(plain, params, [G, G], [G]), X) < 1e-10


def test_frequency_condition_matches_the_commutant_dimension():
    config = AttentionConfig(8, rope_fraction=1.0)
    th = rope_frequencies(config)
    t1 = th[0].item()
    cases = {"default": (th, True)}
    for name, i, value in [("equal", 1, t1), ("opposite", 1, 2 * math.pi - t1),
                           ("shifted", 1, t1 + 2 * math.pi), ("zero", 1, 0.0),
                           ("pi", 1, math.pi), ("3pi", 2, 3 * math.pi)]:
        f = th.clone()
        f[i] = value
        cases[name] = (f, False)
    for name, (f, expected) in cases.items():
        assert rs.frequency_condition(f) is expected, name
        dim = rs.commutant_basis(rotation_matrix(config, 1.0, f)).shape[0]
        assert (dim == config.rotary_dim) is expected, name     # r + (k - r)^2 with k = r


def test_separation_is_the_distance_to_a_coincidence():
    assert rs.separation([0.5, 1.0]) == pytest.approx(abs(math.e ** 0.5j - math.e ** 1j))
    assert rs.separation([0.5, 2 * math.pi - 0.5]) < 1e-12
    assert rs.separation([math.pi, 1.0]) < 1e-12


def test_short_causal_bounds():
    assert rs.short_causal_bounds(8, 8, 8) == (28, 36)      # s = 8: s(s-1)/2 = 28
    assert rs.short_causal_bounds(8, 2, 4) == (4, 4)         # 2k <= d: s = 0


def test_measure_seeds_pairs_every_seed_with_the_closed_form():
    c = AttentionConfig(4, 2, n_kv_heads=1, rope_fraction=1.0)
    run = rs.measure_seeds(c, [0, 1])
    assert len(run.checks) == 2 and [x.seed for x in run.checks] == [0, 1]
    assert run.total == count(c).total == 2 * 4 * 4 + 4 * 4
    assert run.unidentified == count(c).unidentified == 2 + 4   # dim C(R(1)) = 2, v^2 = 4
    assert run.measured == (6,) and run.certified and run.agrees
    assert run.gap >= 1e4
    with pytest.raises(ValueError, match="seeds"):
        rs.measure_seeds(c, [])
