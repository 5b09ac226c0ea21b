"""The structured rank engine (idlib.fastrank) against the dense SVD of the full Jacobian."""
import math

import pytest
import torch

from idlib.attention import flatten, forward, init_params, n_params, param_slices, random_inputs
from idlib.config import AttentionConfig
from idlib.counting import count
from idlib.fastrank import (StructureError, applicable, coupled_directions, group_parameter_index,
                            head_outputs, structured_rank)
from idlib.rank import (AUTO_DENSE_MAX_PARAMS, CERTIFY_GAP, default_n_sequences, default_seq_len,
                        jacobian, measure, rank_from_singular_values)

CONFIGS = [
    dict(d_model=8, n_heads=2),
    dict(d_model=8, n_heads=2, bias="qkvo"),
    dict(d_model=8, n_heads=4, n_kv_heads=2, bias="qk"),                     # GQA
    dict(d_model=8, n_heads=4, n_kv_heads=1, bias="qkv"),                    # multi-query
    dict(d_model=8, n_heads=2, rope_fraction=0.5, bias="kv"),                # partial RoPE
    dict(d_model=6, n_heads=3, rope_fraction=1.0, bias="vo", causal=True),   # full RoPE, causal
    dict(d_model=8, n_heads=2, head_dim=6, value_dim=3, bias="o"),           # k != v
    dict(d_model=16, n_heads=4, bias="qkvo"),                                # j = 2 directions of W
]


def _setup(config, seed=0):
    n = default_seq_len(config)
    X = random_inputs(config, default_n_sequences(config, n), n, seed)
    return init_params(config, seed), X


def _dense(config, params, X):
    J = jacobian(config, params, X)
    sv = torch.linalg.svdvals(J)
    return J, sv, *rank_from_singular_values(sv, tuple(J.shape))


@pytest.mark.parametrize("kw", CONFIGS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_same_rank_as_dense_svd_and_bounds_bracket_it(kw):
    config = AttentionConfig(**kw)
    params, X = _setup(config)
    J, sv, rank, gap = _dense(config, params, X)
    s = structured_rank(config, params, X)
    assert gap >= CERTIFY_GAP
    assert s.rank == rank == count(config).identified
    assert s.n_params == n_params(config) and s.n_rows == J.shape[0]
    assert s.gap >= CERTIFY_GAP
    # the lower bound never exceeds the true sigma_r; the lifted kernel is a kernel of J itself
    assert 0 < s.sigma_r_lower <= sv[rank - 1].item() * (1 + 1e-9)
    assert s.sigma_next_upper <= 1e-12 * sv[0].item()
    # a lower bound never exceeds the truth, and tracks it: within 100x of the dense route
    assert gap / 100 <= s.gap <= gap * (1 + 1e-9)
    assert s.sigma_r_lower >= sv[rank - 1].item() / 100
    assert s.kernel_singular_values.numel() == n_params(config) - rank


def test_head_outputs_times_W_O_is_the_layer():
    config = AttentionConfig(d_model=8, n_heads=4, n_kv_heads=2, rope_fraction=1.0, bias="qkvo")
    params, X = _setup(config)
    Z = head_outputs(config, params, X)
    out = torch.einsum("bhnv,hvd->bnd", Z, params["W_O"]) + params["b_O"]
    assert torch.allclose(out, forward(config, params, X), rtol=0, atol=1e-12)


def test_group_indices_partition_the_non_output_parameters():
    config = AttentionConfig(d_model=8, n_heads=4, n_kv_heads=2, bias="qkvo")
    sl = param_slices(config)
    idx = torch.cat([group_parameter_index(config, g) for g in range(config.n_kv_heads)])
    expected = set(range(n_params(config))) - set(range(sl["W_O"].start, sl["W_O"].stop)) \
        - set(range(sl["b_O"].start, sl["b_O"].stop))
    assert idx.numel() == len(expected) and set(idx.tolist()) == expected
    # group 1's slice picks exactly W_K[1] (and not group 0's key weights)
    params = init_params(config, 0)
    theta = flatten(params)
    g1 = theta[group_parameter_index(config, 1)]
    m, d, k = config.group_size, config.d_model, config.head_dim
    wk = g1[m * d * k:(m + 1) * d * k]
    assert torch.equal(wk, params["W_K"][1].reshape(-1))


def test_measure_routes_agree_and_auto_keeps_small_layers_dense():
    config = AttentionConfig(d_model=8, n_heads=2, bias="qkvo")
    dense, fast, auto = (measure(config, method=m) for m in ("dense", "structured", "auto"))
    assert dense.method == "dense" and fast.method == "structured"
    assert auto.method == "dense" and n_params(config) <= AUTO_DENSE_MAX_PARAMS
    assert dense.rank == fast.rank == auto.rank and dense.certified and fast.certified
    assert dense.singular_values.numel() == n_params(config)
    # structured: [lower bound on sigma_r, upper bounds on sigma_{r+1}..sigma_P]
    assert fast.singular_values.numel() == 1 + fast.unidentified
    assert fast.singular_values[0] <= dense.singular_values[fast.rank - 1] * (1 + 1e-9)
    # gap = sigma_r lower bound / max(||J V||, tau'): never above the raw ratio of the bounds,
    # and equal to it only when ||J V|| sits above the round-off tolerance.
    s = structured_rank(config, *_setup(config))
    tau = s.factors["tolerance_upper"]
    assert 0 < tau < s.sigma_r_lower / CERTIFY_GAP
    assert math.isclose(fast.gap, s.sigma_r_lower / max(s.sigma_next_upper, tau))
    assert fast.gap <= (fast.singular_values[0] / fast.singular_values[1]).item() * (1 + 1e-12)
    # the lower bound on sigma_r is at least the cruder a s / sqrt(a^2 + b^2 + s^2)
    a, b, sz = (s.factors[k] for k in ("a", "b", "s"))
    assert s.sigma_r_lower >= a * sz / math.sqrt(a * a + b * b + sz * sz) * (1 - 1e-12)


def test_auto_uses_the_structured_route_above_the_threshold():
    config = AttentionConfig(d_model=24, n_heads=4)                # 2,304 parameters
    assert n_params(config) > AUTO_DENSE_MAX_PARAMS
    m = measure(config)
    assert m.method == "structured" and m.certified
    assert m.rank == count(config).identified and m.unidentified == count(config).unidentified


def test_bad_method_is_one_line_error():
    with pytest.raises(ValueError, match=r"method='svd' must be one of auto, dense, structured"):
        measure(AttentionConfig(d_model=4), method="svd")


def test_wide_values_are_refused_and_auto_falls_back_to_dense():
    config = AttentionConfig(d_model=4, n_heads=2, head_dim=6, value_dim=5, bias="qv")   # H v > d
    assert "n_heads * value_dim = 10 must be at most d_model = 4" in applicable(config)
    params, X = _setup(config)
    with pytest.raises(StructureError, match="must be at most d_model"):
        structured_rank(config, params, X)
    with pytest.raises(StructureError):
        measure(config, method="structured")
    assert measure(config).method == "dense"


def test_degenerate_output_projection_is_not_certified():
    """A zero head makes W_O rank deficient: the bound must refuse to certify, not guess."""
    config = AttentionConfig(d_model=8, n_heads=2)
    params, X = _setup(config)
    params["W_O"] = params["W_O"].clone()
    params["W_O"][0] = 0.0
    s = structured_rank(config, params, X)
    assert s.gap < CERTIFY_GAP and s.factors["sigma_min_W"] < 1e-12
    dense = measure(config, params=params, method="dense")
    assert dense.certified and dense.rank < count(config).identified


def test_coupled_bound_directions_and_dominance():
    # j = ceil(Hv / 8), at most Hv - 1 and 4000 / (B n); none for a single column
    assert [coupled_directions(hv, 100) for hv in (1, 2, 8, 9, 64, 128)] == [0, 1, 1, 2, 8, 16]
    assert coupled_directions(128, 910) == 4 and coupled_directions(64, 462) == 8
    # the coupled bound is the one that counts: far above the uncoupled one, below the truth
    config = AttentionConfig(d_model=16, n_heads=2)
    params, X = _setup(config)
    _, sv, rank, _ = _dense(config, params, X)
    s = structured_rank(config, params, X)
    uncoupled = 1 / math.sqrt((1 + s.factors["ell"] ** 2) / s.factors["a"] ** 2 + 1 / s.factors["s"] ** 2)
    assert s.sigma_r_lower == s.factors["coupled"] > 20 * uncoupled
    assert sv[rank - 1].item() / 20 < s.sigma_r_lower < sv[rank - 1].item()
