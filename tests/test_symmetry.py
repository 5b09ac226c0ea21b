"""The symmetry group: its action leaves the layer unchanged, its tangent has the counted size."""
import pytest
import torch

from idlib.attention import flatten, forward, init_params, random_inputs
from idlib.config import AttentionConfig
from idlib.counting import count, rope_commutant_dim
from idlib.rank import jacobian
from idlib.symmetry import (commutant_basis, permute_heads, random_group_element,
                            rotation_matrix, tangent_basis)

CONFIGS = [
    dict(d_model=4),
    dict(d_model=6, n_heads=3),
    dict(d_model=8, n_heads=4, n_kv_heads=2),
    dict(d_model=8, n_heads=4, n_kv_heads=1, bias="qkvo"),
    dict(d_model=6, n_heads=3, rope_fraction=1.0, bias="qk"),
    dict(d_model=8, n_heads=2, rope_fraction=0.5, bias="kv", causal=True),
    dict(d_model=4, n_heads=2, head_dim=6, value_dim=5, bias="qv"),     # k, v > d: null moves
    dict(d_model=5, n_heads=2, n_kv_heads=1, head_dim=3, value_dim=7, bias="v"),    # v > d, no output bias
    dict(d_model=6, n_heads=3, head_dim=1, value_dim=1, bias="vo"),     # smallest heads
]


def _rel_change(config, p, q):
    X = random_inputs(config, 3, 7, seed=1)
    y0, y1 = forward(config, p, X), forward(config, q, X)
    return ((y1 - y0).abs().max() / y0.abs().max()).item()


@pytest.mark.parametrize("kw", CONFIGS, ids=str)
def test_group_element_leaves_output_unchanged(kw):
    config = AttentionConfig(**kw)
    p = init_params(config, seed=3)
    q = random_group_element(config, p, seed=4)
    moved = ((flatten(q) - flatten(p)).norm() / flatten(p).norm()).item()
    assert moved > 1e-2                      # a real move, not the identity
    assert _rel_change(config, p, q) <= 1e-10


@pytest.mark.parametrize("kw", CONFIGS, ids=str)
def test_tangent_dimension_is_the_count_and_lies_in_the_jacobian_kernel(kw):
    config = AttentionConfig(**kw)
    p = init_params(config, seed=5)
    T = tangent_basis(config, p)
    assert T.shape[1] == count(config).unidentified
    assert torch.allclose(T.T @ T, torch.eye(T.shape[1], dtype=T.dtype), atol=1e-10)
    J = jacobian(config, p, random_inputs(config, 4, config.d_model + 2, seed=6))
    assert (J @ T).abs().max().item() <= 1e-9 * J.abs().max().item()


def test_commutant_of_distinct_and_repeated_frequencies():
    config = AttentionConfig(d_model=8, head_dim=8, rope_fraction=0.75)   # r = 6, 2 pass dims
    distinct = torch.tensor([1.0, 0.3, 0.05], dtype=torch.float64)
    repeated = torch.tensor([1.0, 1.0, 0.05], dtype=torch.float64)
    for freqs, expected in [(distinct, 6 + 4), (repeated, 2 * 4 + 2 + 4)]:
        basis = commutant_basis(rotation_matrix(config, 1.0, freqs))
        assert basis.shape[0] == rope_commutant_dim(freqs, 2) == expected


def test_head_permutation_is_a_symmetry_and_bad_permutations_are_refused():
    config = AttentionConfig(d_model=8, n_heads=4, n_kv_heads=2, bias="qkvo")
    p = init_params(config, seed=0)
    q = permute_heads(config, p, [3, 2, 1, 0])          # swaps the two groups and heads inside
    assert _rel_change(config, p, q) <= 1e-12
    with pytest.raises(ValueError, match="must map each key/value group onto one group"):
        permute_heads(config, p, [0, 2, 1, 3])
    with pytest.raises(ValueError, match="must be a permutation"):
        permute_heads(config, p, [0, 0, 1, 2])
