"""The structured rank engine (idlib.fastrank) against the dense SVD of the full Jacobian."""
import math

import pytest
import torch

from idlib.attention import flatten, forward, init_params, n_params, param_slices, random_inputs
from idlib.config import AttentionConfig, ConfigError
from idlib.counting import count
from idlib.fastrank import (StructureError, applicable, coupled_directions, group_config,
                            group_parameter_index, head_outputs, lifted_image, structured_rank)
from idlib.certify import roundoff_tolerance
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


def test_auto_uses_the_structured_route_above_the_threshold_without_a_block_route():
    config = AttentionConfig(d_model=24, n_heads=4, input_centered=True)   # 2,304 parameters
    assert n_params(config) > AUTO_DENSE_MAX_PARAMS
    m = measure(config)
    assert m.method == "structured" and m.certified      # centred inputs declare no block route
    assert m.rank == count(config).identified and m.unidentified == count(config).unidentified
    assert measure(config.replace(input_centered=False)).method == "block"


def test_bad_method_is_one_line_error():
    with pytest.raises(ConfigError, match=r"^measure: method='svd' must be one of 'auto', 'dense', 'structured', 'block'$"):
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
    # j = ceil(Hv / 8), at most Hv - 1 and 16,000 / (B n); none for a single column
    assert [coupled_directions(hv, 100) for hv in (1, 2, 8, 9, 64, 128)] == [0, 1, 1, 2, 8, 16]
    assert coupled_directions(128, 910) == 16 and coupled_directions(64, 462) == 8
    assert coupled_directions(128, 16000) == 1 and coupled_directions(128, 8000) == 2
    # the coupled bound is the one that counts: far above the uncoupled one, below the truth
    config = AttentionConfig(d_model=16, n_heads=2)
    params, X = _setup(config)
    _, sv, rank, _ = _dense(config, params, X)
    s = structured_rank(config, params, X)
    uncoupled = 1 / math.sqrt((1 + s.factors["ell"] ** 2) / s.factors["a"] ** 2 + 1 / s.factors["s"] ** 2)
    assert s.sigma_r_lower == s.factors["coupled"] > 20 * uncoupled
    assert sv[rank - 1].item() / 20 < s.sigma_r_lower < sv[rank - 1].item()


# -- every reported factor against its definition, computed densely --------------------------

def _dense_factors(config, params, X):
    """The module docstring's quantities from the dense Jacobian of the head outputs Z."""
    from idlib.attention import unflatten
    from idlib.certify import roundoff_tolerance
    B, n = X.shape[0], X.shape[1]
    H, G, m, v, d = config.n_heads, config.n_kv_heads, config.group_size, config.value_dim, config.d_model
    theta = flatten(params)

    def zmat(t):
        Z = head_outputs(config, unflatten(config, t), X)
        return Z.permute(0, 2, 1, 3).reshape(B * n, H * v)

    JZ = torch.func.jacfwd(zmat)(theta)                                  # (Bn, Hv, P)
    Zp = zmat(theta)
    if config.has_bias("o"):
        Zp = torch.cat([Zp, torch.ones(B * n, 1, dtype=Zp.dtype)], dim=1)
    Q, R = torch.linalg.qr(Zp)
    W = params["W_O"].reshape(H * v, d)
    s_W = torch.linalg.svdvals(W)
    out = {"s": torch.linalg.svdvals(Zp).min().item(), "sigma_min_Z": torch.linalg.svdvals(Zp).min().item(),
           "sigma_max_Z": torch.linalg.svdvals(Zp).max().item(),
           "sigma_min_W": s_W.min().item(), "sigma_max_W": s_W.max().item()}
    sig_r, nM, nL, nJZ, ranks, norm_Wg, gaps = [], [], [], [], [], [], []
    for g in range(G):
        Jg = JZ[:, g * m * v:(g + 1) * m * v][..., group_parameter_index(config, g)]
        M = torch.einsum("rc,rjp->cjp", Q, Jg)
        K = (Jg - torch.einsum("rc,cjp->rjp", Q, M)).reshape(-1, Jg.shape[-1])
        sv = torch.linalg.svdvals(K)
        nM.append(torch.linalg.matrix_norm(M.reshape(-1, M.shape[-1]), 2).item())
        # the block's cut is taken on lambda = sigma^2 of K's Gram matrix, with the round-off
        # of what K = T - Q Q^T T is computed from: scale ||Q^T T||^2 + lambda_1 (its noise
        # lambda_{r+1} sits below that tolerance, so the gap is sqrt(lambda_r / tau_g))
        tau_g = roundoff_tolerance(nM[-1] ** 2 + sv[0].item() ** 2, tuple(K.shape))
        r_g = int((sv ** 2 > tau_g).sum())
        ranks.append(r_g)
        sig_r.append(sv[r_g - 1].item())
        gaps.append(sv[r_g - 1].item() / math.sqrt(tau_g))
        L = torch.linalg.solve_triangular(R, M.reshape(R.shape[0], -1), upper=True)
        nL.append(torch.linalg.matrix_norm(L.reshape(-1, M.shape[-1]), 2).item())
        nJZ.append(math.hypot(nM[-1], sv[0].item()))
        norm_Wg.append(torch.linalg.matrix_norm(W[g * m * v:(g + 1) * m * v], 2).item())
    out.update(min_block_sigma_r=min(sig_r), max_norm_QtJZ=max(nM), block_ranks=tuple(ranks),
               block_gaps=tuple(gaps), ell_terms=(s_W.max().item() * max(nL),
                                                  math.hypot(*(x * y for x, y in zip(nL, norm_Wg)))),
               a=s_W.min().item() * min(sig_r), b=s_W.max().item() * max(nM),
               ell=min(s_W.max().item() * max(nL), math.hypot(*(x * y for x, y in zip(nL, norm_Wg)))))
    out["tolerance_upper"] = roundoff_tolerance(math.hypot(s_W.max().item() * max(nJZ), out["sigma_max_Z"]),
                                                (B * n * d, n_params(config)))
    out["uncoupled"] = 1 / math.sqrt((1 + out["ell"] ** 2) / out["a"] ** 2 + 1 / out["s"] ** 2)
    return out


@pytest.mark.parametrize("kw, group0_scale", [(dict(d_model=8, n_heads=2, bias="qkvo"), 1.0),
                                              (dict(d_model=8, n_heads=4, n_kv_heads=2, rope_fraction=1.0,
                                                    bias="qv"), 1.0),
                                              (dict(d_model=8, n_heads=4, n_kv_heads=2, bias="k"), 10.0)],
                         ids=["mha-biases", "gqa-rope", "gqa-unequal-groups"])
def test_every_factor_is_its_definition(kw, group0_scale):
    """Every factor of the bound against its definition from the dense Jacobian of Z; with group
    0's rows of W_O scaled by 10, ell takes its second form, sqrt(sum_g (||L_g|| ||W_g||)^2)."""
    import time
    config = AttentionConfig(**kw)
    params, X = _setup(config)
    params["W_O"] = params["W_O"].clone()
    params["W_O"][:config.group_size] *= group0_scale
    t0 = time.perf_counter()
    s = structured_rank(config, params, X)
    elapsed = time.perf_counter() - t0
    want = _dense_factors(config, params, X)
    assert s.block_ranks == want.pop("block_ranks")
    assert s.block_gaps == pytest.approx(want.pop("block_gaps"), rel=1e-6)
    first, second = want.pop("ell_terms")
    assert (second < first) == (group0_scale != 1.0)
    for key, value in want.items():
        assert math.isclose(s.factors[key], value, rel_tol=1e-7), key
    J, sv, rank, _ = _dense(config, params, X)
    assert s.factors["uncoupled"] <= sv[rank - 1].item()
    assert s.sigma_r_lower == max(s.factors["uncoupled"], s.factors["coupled"])
    assert s.gap == s.sigma_r_lower / max(s.sigma_next_upper, s.factors["tolerance_upper"])
    assert s.factors["j"] == coupled_directions(config.n_heads * config.value_dim, X.shape[0] * X.shape[1])
    # the u upper bounds sigma_i(J V) dominate J's u smallest singular values, in order, up to
    # the dense SVD's own rounding (J's u smallest are 0 in exact arithmetic; the dense route
    # returns them as noise below its tolerance, which sigma_i(J V) may undercut)
    u = n_params(config) - rank
    assert s.kernel_singular_values.numel() == u
    noise = roundoff_tolerance(sv[0].item(), tuple(J.shape))
    assert torch.all(sv[rank:] <= noise) and s.sigma_next_upper <= noise
    assert torch.all(sv[rank:].flip(0) <= s.kernel_singular_values.sort().values * (1 + 1e-6) + noise)
    assert s.sigma_next_upper == s.kernel_singular_values.max().item()
    assert all(g >= 1e4 for g in s.block_gaps)
    timings = s.factors["seconds"]
    assert set(timings) == {"blocks", "block_svd", "coupled_bound", "upper_bound"}
    assert all(0 <= t <= elapsed for t in timings.values()) and sum(timings.values()) <= elapsed


def test_norm2_bounds_the_spectral_norm_from_above_within_1e_10():
    from idlib.fastrank import _norm2
    gen = torch.Generator().manual_seed(3)
    for shape, scale in (((7, 3), 1.0), ((3, 7), 1.0), ((5, 5), 1e-3)):
        A = scale * torch.randn(*shape, generator=gen, dtype=torch.float64)
        true = torch.linalg.matrix_norm(A, 2).item()
        assert true <= _norm2(A) <= true * (1 + 2e-10)


def test_norm2_above_the_eigh_size_is_a_certified_upper_bound(monkeypatch):
    """Past NORM_EIGH_MAX: subspace iteration, then mu (1 - SAFETY) I - G tested by Cholesky from
    e = 1e-4 up; an upper bound within 1e-4 relative of lambda_max (the first e passes), also with
    the two top singular values 1e-6 apart; the trace where no Cholesky passes."""
    import idlib.fastrank as fr
    monkeypatch.setattr(fr, "NORM_EIGH_MAX", 4)
    gen = torch.Generator().manual_seed(5)
    U = torch.linalg.qr(torch.randn(40, 12, generator=gen, dtype=torch.float64))[0]
    V = torch.linalg.qr(torch.randn(30, 12, generator=gen, dtype=torch.float64))[0]
    for top in ([3.0, 1.0], [3.0, 3.0 - 3e-6]):
        s = torch.tensor(top + [0.5] * 10, dtype=torch.float64)
        A = U @ torch.diag(s) @ V.T
        for M in (A, A.T):
            assert 3.0 <= fr._norm2(M) <= 3.0 * (1 + 1e-4) ** 0.5 * (1 + 1e-12)
    passes = []
    real = torch.linalg.cholesky_ex
    monkeypatch.setattr(torch.linalg, "cholesky_ex", lambda M: (passes.append(1), real(-torch.eye(len(M),
                        dtype=M.dtype)))[1])
    A = U @ torch.diag(torch.tensor([3.0, 1.0] + [0.5] * 10, dtype=torch.float64)) @ V.T
    assert fr._norm2(A) == pytest.approx((9.0 + 1.0 + 2.5) ** 0.5 * (1 + 1e-10), rel=1e-12)
    assert len(passes) == 5


def test_norm2_uses_the_smaller_gram_matrix_and_eigh_up_to_its_limit():
    """A 3 x 1100 matrix and its transpose have a Gram matrix of order 3, A 1024 x 1030 one of
    order NORM_EIGH_MAX = 1024 exactly: eigh, within 1e-10 (the certified bound is 1e-4 loose)."""
    from idlib.fastrank import NORM_EIGH_MAX, _norm2
    gen = torch.Generator().manual_seed(6)
    for shape in ((3, 1100), (1100, 3), (NORM_EIGH_MAX, NORM_EIGH_MAX + 6)):
        A = torch.randn(*shape, generator=gen, dtype=torch.float64)
        true = torch.linalg.matrix_norm(A, 2).item()
        assert true <= _norm2(A) <= true * (1 + 2e-10), shape


def test_norm2_bound_is_the_same_whatever_the_global_seed(monkeypatch):
    """The subspace iteration starts from its own seeded block, not torch's global generator."""
    import idlib.fastrank as fr
    monkeypatch.setattr(fr, "NORM_EIGH_MAX", 4)
    A = torch.randn(30, 20, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    bounds = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        bounds.append(fr._norm2(A))
    assert bounds[0] == bounds[1]


def test_norm2_raises_its_estimate_by_1e_4_then_decades_up_to_2(monkeypatch):
    """Where no test passes, mu = theta (1 + e) for e = 1e-4, 1e-3, 1e-2, 1e-1, 1, in that order."""
    import idlib.fastrank as fr
    monkeypatch.setattr(fr, "NORM_EIGH_MAX", 4)
    tried = []
    monkeypatch.setattr(fr, "_certified_below", lambda G, mu: tried.append(mu) and False)
    A = torch.randn(30, 20, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    fr._norm2(A)
    theta = tried[0] / (1 + 1e-4)
    assert [mu / theta for mu in tried] == pytest.approx([1 + 1e-4, 1.001, 1.01, 1.1, 2.0], rel=1e-13)


def test_certified_below_takes_the_relative_margin_off_mu():
    """lambda_max(G) = 3: mu = 3 (1 + SAFETY / 2) is refused (mu (1 - SAFETY) < 3), 3 (1 + 2 SAFETY)
    certified."""
    from idlib.fastrank import SAFETY, _certified_below
    Q = torch.linalg.qr(torch.randn(6, 6, generator=torch.Generator().manual_seed(9), dtype=torch.float64))[0]
    G = Q @ torch.diag(torch.tensor([3.0, 2.0, 1.0, 0.5, 0.1, 0.0], dtype=torch.float64)) @ Q.T
    before = G.clone()
    assert not _certified_below(G, 3.0 * (1 + SAFETY / 2))
    assert _certified_below(G, 3.0 * (1 + 2 * SAFETY))
    assert torch.equal(G, before)


def test_coupled_directions_budget_is_16000_rows_times_directions():
    """The default budget: at most 16,000 / (B n) directions (B n j <= 16,000), an int."""
    assert coupled_directions(200_000, 1) == 16000 and coupled_directions(200_000, 2) == 8000
    assert coupled_directions(200_000, 3) == 5333
    assert all(type(coupled_directions(hv, rows)) is int for hv, rows in ((128, 16000), (128, 7), (9, 100)))


def test_factored_rows_convert_both_factors():
    from idlib.fastrank import FactoredRows
    rows = FactoredRows(torch.ones(2, 3, dtype=torch.float64), torch.ones(3, 1, dtype=torch.float64))
    low = rows.to(torch.float32)
    assert (low.E.dtype, low.U.dtype) == (torch.float32, torch.float32)


def test_applicable_names_each_rule():
    rule = ("variant(s) {}: no structured Jacobian blocks declared (the structured route takes a "
            "layer only when every variant in it declares them)")
    assert applicable(AttentionConfig(d_model=8, n_heads=2, softcap=50.0)) == rule.format("softcap (softcap)")
    assert applicable(AttentionConfig(d_model=8, n_heads=2, n_layers=2)) == \
        rule.format("stack (n_layers, kv_share)")
    assert applicable(AttentionConfig(d_model=8, n_heads=2, qk_norm="gain")) == rule.format("qk_norm (qk_norm)")
    assert applicable(AttentionConfig(d_model=8, n_heads=2, qk_norm="plain")) is None
    assert applicable(AttentionConfig(d_model=8, n_heads=2, bias="qkvo", rope_fraction=1.0)) is None
    assert coupled_directions(64, 40000) == 1 and coupled_directions(1, 10) == 0


@pytest.mark.parametrize("qk_norm", ["none", "plain"], ids=["closed-form", "forward-mode"])
def test_explicit_frequencies_reach_every_part(qk_norm):
    """Two planes with one frequency: a larger commutant; both routes see the given angles (also
    through the forward-mode blocks of a layer with query/key norms)."""
    config = AttentionConfig(d_model=8, n_heads=2, rope_fraction=1.0, qk_norm=qk_norm)
    params, X = _setup(config)
    freqs = torch.tensor([0.7, 0.7], dtype=torch.float64)
    s = structured_rank(config, params, X, frequencies=freqs)
    dense = measure(config, params=params, frequencies=freqs, method="dense")
    assert s.rank == dense.rank == count(config, freqs).identified < count(config).identified
    Z = head_outputs(config, params, X, freqs)
    out = torch.einsum("bhnv,hvd->bnd", Z, params["W_O"])
    assert torch.allclose(out, forward(config, params, X, freqs), rtol=0, atol=1e-12)
    assert not torch.allclose(Z, head_outputs(config, params, X), atol=1e-6)


# -- the coupled bound's test and search, against the matrix inequality itself ------------------

def _synthetic_blocks(seed=0, groups=2, r=5, rows=3, j=2):
    gen = torch.Generator().manual_seed(seed)
    rnd = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    blocks = []
    for _ in range(groups):
        S = torch.linspace(3.0, 1.0, r, dtype=torch.float64) + 0.1 * rnd(r).abs()
        B = rnd(r, r)
        blocks.append((S.sort(descending=True).values, 0.3 * rnd(rows * j, r), 0.2 * (B @ B.T)))
    return blocks


def _dense_passes(blocks, lam, alpha, delta, rows, s):
    """alpha Sigma^2 - lam N - (T Sigma)^T Delta (T Sigma) >= 0 with the SAFETY margins, by solves."""
    from idlib.fastrank import SAFETY
    c = 1.0 / (1.0 - lam / (s * s))
    w2 = delta.repeat(rows)
    gram = 0.0
    for S, TS, ML in blocks:
        A = torch.diag(alpha * S * S - lam - SAFETY * alpha * S[0].item() ** 2) - lam * c * ML
        if torch.linalg.eigvalsh(A)[0].item() <= 0:
            return False
        if delta.numel():
            gram = gram + (TS * w2.sqrt()[:, None]) @ torch.linalg.solve(
                A, (TS * w2.sqrt()[:, None]).T)
    return delta.numel() == 0 or torch.linalg.eigvalsh(gram)[-1].item() <= 1.0 - SAFETY


def _threshold(blocks, alpha, delta, rows, s, hi):
    lo = 0.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _dense_passes(blocks, mid, alpha, delta, rows, s) else (lo, mid)
    return lo


@pytest.mark.parametrize("s", [50.0, 2.0], ids=["s-large", "s-small"])
def test_coupled_test_decides_the_matrix_inequality(s):
    from idlib.fastrank import _coupled_test
    blocks = _synthetic_blocks()
    alpha, delta, rows = 1.5, torch.tensor([0.9, 0.4], dtype=torch.float64), 3
    star = _threshold(blocks, alpha, delta, rows, s, hi=min(s * s / 2, alpha))
    assert 0 < star < s * s / 2
    assert _coupled_test(blocks, star * (1 - 1e-7), alpha, delta, rows, s)
    assert not _coupled_test(blocks, star * (1 + 1e-7), alpha, delta, rows, s)
    empty = torch.zeros(0, dtype=torch.float64)          # j = 0: only the Cholesky factors decide
    star0 = _threshold(blocks, alpha, empty, rows, s, hi=min(s * s / 2, 4 * alpha))
    assert star0 > star
    assert _coupled_test(blocks, star0 * (1 - 1e-7), alpha, empty, rows, s)
    assert not _coupled_test(blocks, star0 * (1 + 1e-7), alpha, empty, rows, s)


@pytest.mark.parametrize("s", [50.0, 1.2], ids=["top-from-blocks", "top-from-s"])
def test_coupled_lower_bound_is_the_best_grid_point(s):
    """sqrt(lam) with lam = lam_top 4^-i 2^(k/4) the largest passing grid point, within 2^(1/4)."""
    from idlib.fastrank import coupled_lower_bound
    blocks, rows, j = _synthetic_blocks(seed=1), 3, 2
    s_W = torch.tensor([0.2, 0.7, 1.3, 2.0], dtype=torch.float64)      # ascending
    alpha = s_W[j].item() ** 2
    delta = alpha - s_W[:j] ** 2
    lam_top = min(s * s / 2, alpha * min(S[-1].item() for S, _, _ in blocks) ** 2)
    star = _threshold(blocks, alpha, delta, rows, s, hi=lam_top)
    got = coupled_lower_bound(blocks, s_W, j, rows, s) ** 2
    assert star / 2 ** 0.25 < got <= star
    k = math.log2(lam_top / got) * 4                                    # a whole number of quarter octaves
    assert abs(k - round(k)) < 1e-9 and round(k) >= 8
    assert coupled_lower_bound([(S, TS, 1e6 * ML) for S, TS, ML in blocks], s_W, j, rows, s) < math.sqrt(got)


def _search_problem():
    """Synthetic blocks for coupled_lower_bound's search: (blocks, rows, j, s, s_W ascending, lam_top)."""
    blocks, rows, j, s = _synthetic_blocks(seed=1), 3, 2, 50.0
    s_W = torch.tensor([0.2, 0.7, 1.3, 2.0], dtype=torch.float64)
    lam_top = min(s * s / 2, s_W[j].item() ** 2 * min(S[-1].item() for S, _, _ in blocks) ** 2)
    return blocks, rows, j, s, s_W, lam_top


def test_coupled_lower_bound_is_decided_in_float64(monkeypatch):
    """The float32 search only proposes lam; the float64 test certifies it, from there down by
    2^(1/4), at most CERTIFY_TRIES times (else 0)."""
    import idlib.fastrank as fr
    blocks, rows, j, s, s_W, lam_top = _search_problem()
    calls = []

    def fake(bl, lam, *args):
        calls.append((bl[0][0].dtype, lam))
        return bl[0][0].dtype == torch.float32 or lam <= limit

    monkeypatch.setattr(fr, "_coupled_test", fake)
    limit = lam_top / 4 * 2 ** 1.75 / 2 ** 0.75 * (1 + 1e-9)   # float32 passes all: 4^-1 2^(7/4)
    got = fr.coupled_lower_bound(blocks, s_W, j, rows, s) ** 2
    assert math.isclose(got, lam_top / 4 * 2 ** 1.75 / 2 ** 0.75, rel_tol=1e-12)
    assert [dt for dt, _ in calls] == [torch.float32] * 4 + [torch.float64] * 4
    calls.clear()
    limit = 0.0                                           # float64 never passes: 0, after 8 tries
    assert fr.coupled_lower_bound(blocks, s_W, j, rows, s) == 0.0
    assert [dt for dt, _ in calls].count(torch.float64) == fr.CERTIFY_TRIES == 8
    lams = [lam for dt, lam in calls if dt == torch.float64]
    assert all(math.isclose(a / b, 2 ** 0.25, rel_tol=1e-12) for a, b in zip(lams, lams[1:]))
    calls.clear()
    monkeypatch.setattr(fr, "_coupled_test", lambda bl, lam, *a: calls.append(lam) or False)
    assert fr.coupled_lower_bound(blocks, s_W, j, rows, s) == 0.0 and len(calls) == 30


@pytest.mark.parametrize("kw", [dict(d_model=8, n_heads=2, bias="qkvo"),
                                dict(d_model=8, n_heads=4, n_kv_heads=2, rope_fraction=1.0)],
                         ids=["mha-biases", "gqa-rope"])
def test_lifted_image_is_the_jacobian_times_x(kw):
    """lifted_image(J_Z^g, N, W_g, Z', dW) = J x for any x on group g's and the output parameters."""
    from idlib.attention import unflatten
    from idlib.fastrank import _group_jacobian
    config = AttentionConfig(**kw)
    params, X = _setup(config)
    B, n, d = X.shape[0], X.shape[1], config.d_model
    H, m, v, P = config.n_heads, config.group_size, config.value_dim, n_params(config)
    J = jacobian(config, params, X)
    Z = head_outputs(config, params, X).permute(0, 2, 1, 3).reshape(B * n, H * v)
    Zp = torch.cat([Z, torch.ones(B * n, 1, dtype=Z.dtype)], 1) if config.has_bias("o") else Z
    index = unflatten(config, torch.arange(P))
    gen = torch.Generator().manual_seed(5)
    sub = group_config(config)
    for g in range(config.n_kv_heads):
        idx = group_parameter_index(config, g)
        T = _group_jacobian(sub, flatten(params)[idx], X, None, 64)
        T = T.permute(0, 2, 1, 3, 4).reshape(B * n, m * v, -1)
        N = torch.randn(idx.numel(), 3, generator=gen, dtype=torch.float64)
        dW = torch.randn(Zp.shape[1], d, 3, generator=gen, dtype=torch.float64)
        x = torch.zeros(P, 3, dtype=torch.float64)
        x[idx] = N
        x[index["W_O"].reshape(-1)] = dW[:H * v].reshape(H * v * d, 3)
        if config.has_bias("o"):
            x[index["b_O"]] = dW[H * v]
        got = lifted_image(T, N, params["W_O"].reshape(H * v, d)[g * m * v:(g + 1) * m * v], Zp, dW)
        want = J @ x
        assert got.shape == want.shape
        assert torch.allclose(got, want, rtol=0, atol=1e-12 * want.abs().max().item())


@pytest.mark.parametrize("kw", CONFIGS + [dict(d_model=8, n_heads=2, input_centered=True, bias="qkv",
                                               rope_fraction=1.0)],
                         ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_closed_form_blocks_are_the_forward_mode_blocks(kw):
    """_group_jacobian_closed (Khatri-Rao formulas) = _group_jacobian (torch.func.jvp), to 1e-13."""
    from idlib.fastrank import _group_jacobian, _group_jacobian_closed
    config = AttentionConfig(**kw)
    params, X = _setup(config)
    X = X + 0.5 * torch.arange(X.shape[-1], dtype=X.dtype)    # not centred: the layer centres what it needs
    sub = group_config(config)
    freqs = torch.tensor([0.3, 1.1], dtype=torch.float64)[:config.rotary_dim // 2] if config.rotary_dim == 4 else None
    for g in range(config.n_kv_heads):
        theta_g = flatten(params)[group_parameter_index(config, g)]
        want = _group_jacobian(sub, theta_g, X, freqs, 64)
        got = _group_jacobian_closed(sub, theta_g, X, freqs)
        assert got.shape == want.shape == (X.shape[0], config.group_size, X.shape[1], config.value_dim,
                                           theta_g.numel())
        assert torch.allclose(got, want, rtol=0, atol=1e-13 * want.abs().max().item())


def test_parameterless_qk_norm_takes_forward_mode_blocks_and_agrees_with_dense():
    """qk_norm="plain" has no parameters (the route applies) but no closed form: jvp blocks."""
    import idlib.fastrank as fr
    config = AttentionConfig(d_model=8, n_heads=2, qk_norm="plain", bias="qv")
    assert applicable(config) is None
    params, X = _setup(config)
    _, sv, rank, _ = _dense(config, params, X)
    s = structured_rank(config, params, X)
    assert s.rank == rank == count(config).identified and s.gap >= CERTIFY_GAP
    with pytest.raises(AssertionError):
        sub = group_config(config)
        theta_g = flatten(params)[group_parameter_index(config, 0)]
        assert torch.allclose(fr._group_jacobian_closed(sub, theta_g, X, None),
                              fr._group_jacobian(sub, theta_g, X, None, 64), atol=1e-10)


def test_cholesky_reads_the_lower_triangle_only():
    """_coupled_test forms only the lower triangle of its Gram matrix: torch's Cholesky must not
    look above the diagonal (garbage there changes nothing)."""
    gen = torch.Generator().manual_seed(0)
    A = torch.randn(40, 40, generator=gen, dtype=torch.float64)
    G = A @ A.T + 40 * torch.eye(40, dtype=torch.float64)
    junk = G.tril() + torch.triu(torch.full((40, 40), -1e6, dtype=torch.float64), 1)
    L, info = torch.linalg.cholesky_ex(junk)
    assert info.item() == 0 and torch.equal(L, torch.linalg.cholesky(G))
    bad = G.clone()
    bad[5, 3] = bad[3, 5] = 1e6                    # not PD: the lower triangle says so
    assert torch.linalg.cholesky_ex(bad.tril())[1].item() != 0


def test_gram_and_gram_of_blocks_are_the_full_products():
    """gram(A) = A^T A and gram_of_blocks([A_1, A_2, A_3]) = [A_1, A_2, A_3]^T [A_1, A_2, A_3], both
    exactly symmetric, for column counts that do and do not divide into the 4 blocks."""
    from idlib.fastrank import gram, gram_of_blocks
    gen = torch.Generator().manual_seed(3)
    for n in (1, 3, 7, 40):
        A = torch.randn(50, n, generator=gen, dtype=torch.float64)
        G = gram(A)
        assert torch.equal(G, G.T)
        assert torch.allclose(G, A.T @ A, rtol=0, atol=1e-12 * (A.T @ A).abs().max().item())
    parts = [torch.randn(30, n, generator=gen, dtype=torch.float64) for n in (5, 1, 9)]
    full = torch.cat(parts, dim=1)
    G = gram_of_blocks(parts)
    assert torch.equal(G, G.T)
    assert torch.allclose(G, full.T @ full, rtol=0, atol=1e-12 * (full.T @ full).abs().max().item())


@pytest.mark.parametrize("kw", CONFIGS + [dict(d_model=8, n_heads=2, qk_norm="plain", bias="qv")],
                         ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_split_block_gram_and_products_are_those_of_K(kw):
    """block_gram(split_block(K)) = K^T K and projected_times = (U^T (x) I) K V to 1e-12 relative,
    for every group; and the value columns really are delta_cf Y_h (else the split is wrong)."""
    from idlib.fastrank import _group_jacobian, block_gram, projected_times, split_block
    config = AttentionConfig(**kw)
    params, X = _setup(config)
    sub = group_config(config)
    m, v = config.group_size, config.value_dim
    gen = torch.Generator().manual_seed(1)
    for g in range(config.n_kv_heads):
        theta_g = flatten(params)[group_parameter_index(config, g)]
        T = _group_jacobian(sub, theta_g, X, None, 64)
        T = T.permute(0, 2, 1, 3, 4).reshape(-1, m * v, theta_g.numel())
        Q = torch.linalg.qr(torch.randn(T.shape[0], 3, generator=gen, dtype=torch.float64))[0]
        K = T - torch.einsum("rc,cjp->rjp", Q, torch.einsum("rc,rjp->cjp", Q, T))
        split = split_block(K, sub)
        Kv = K[:, :, split.vcols].reshape(K.shape[0], m, v, -1, v)
        want_v = torch.einsum("rha,cf->rhcaf", split.Y, torch.eye(v, dtype=torch.float64))
        assert torch.allclose(Kv, want_v, rtol=0, atol=1e-14 * K.abs().max().item())
        Kmat = K.reshape(-1, K.shape[-1])
        want = Kmat.T @ Kmat
        assert torch.allclose(block_gram(split), want, rtol=0, atol=1e-12 * want.abs().max().item())
        U = torch.randn(m * v, 2, generator=gen, dtype=torch.float64)
        V = torch.randn(K.shape[-1], 5, generator=gen, dtype=torch.float64)
        want = torch.einsum("rip,ik->rkp", K, U).reshape(-1, K.shape[-1]) @ V
        assert torch.allclose(projected_times(split, U, V), want, rtol=0, atol=1e-12 * want.abs().max().item())


def test_orthonormalised_singular_values_are_those_of_J_times_an_orthonormal_basis():
    """From X^T X and (J X)^T (J X) alone: the singular values of J Q, Q = orth(X), descending,
    to 1e-10 (X far from orthonormal, so a transposed factor or a wrong symmetrisation shows)."""
    from idlib.fastrank import orthonormalised_singular_values
    gen = torch.Generator().manual_seed(4)
    X = torch.randn(30, 6, generator=gen, dtype=torch.float64) @ torch.diag(
        torch.tensor([1.0, 3.0, 0.2, 5.0, 1.5, 0.7], dtype=torch.float64))
    X[:, 1] += 2 * X[:, 0]
    J = torch.randn(20, 30, generator=gen, dtype=torch.float64)
    want = torch.linalg.svdvals(J @ torch.linalg.qr(X)[0])
    got = orthonormalised_singular_values(X.T @ X, (J @ X).T @ (J @ X))
    assert torch.all(got[:-1] >= got[1:])
    assert torch.allclose(got, want, rtol=1e-10, atol=0)


# -- the guards, the corner of B n = c rows, and what reaches the coupled bound ------------------

def _perturbed(fn, size, where):
    """fn with `size` added at one entry of its output (the entry `where` picks)."""
    def wrapped(*args, **kw):
        out = fn(*args, **kw).clone()
        flat = out.reshape(-1)
        flat[where(flat)] += size
        return out
    return wrapped


def test_output_guard_takes_round_off_and_refuses_anything_more(monkeypatch):
    """The layer's output must be Z' W' to 1e-12 relative (atol 1e-12 max|out|): a change of
    0.5e-12 max|out| at the smallest entry passes, 1e-11 max|out| at the largest is refused (an
    absolute 1e-9 here, below allclose's default atol of 1e-8)."""
    import idlib.fastrank as fr
    config = AttentionConfig(d_model=8, n_heads=2, bias="o")
    params, X = _setup(config)
    params["W_O"] = 30 * params["W_O"]                      # max|out| >> 1, so atol / max differs
    top = fr.forward(config, params, X).abs().max().item()
    assert 5 < top < 500
    monkeypatch.setattr(fr, "forward", _perturbed(fr.forward, 0.5e-12 * top, lambda f: f.abs().argmin()))
    assert structured_rank(config, params, X).rank == count(config).identified
    monkeypatch.setattr(fr, "forward", _perturbed(fr.forward.__wrapped__ if hasattr(fr.forward, "__wrapped__")
                                                  else forward, 1e-11 * top, lambda f: f.abs().argmax()))
    with pytest.raises(StructureError) as err:
        structured_rank(config, params, X)
    assert str(err.value) == "the layer's output is not (head outputs) @ W_O + b_O"


def test_group_guard_takes_round_off_and_refuses_anything_more(monkeypatch):
    """Each group's heads recomputed from its own parameters must match Z to 1e-12 relative,
    1e-13 absolute; 1e-9 on one entry of group 1 is refused, naming the group."""
    import idlib.fastrank as fr
    config = AttentionConfig(d_model=8, n_heads=4, n_kv_heads=2)
    params, X = _setup(config)
    real = fr.head_outputs
    calls = []

    def heads(cfg, *args, **kw):
        out = real(cfg, *args, **kw)
        if cfg.n_kv_heads == 1:                          # a group's own recomputation
            calls.append(cfg)
            if len(calls) == 2:                          # group 1
                out = out.clone()
                out.reshape(-1)[out.abs().reshape(-1).argmin()] += size
        return out

    monkeypatch.setattr(fr, "head_outputs", heads)
    size = 5e-14
    assert structured_rank(config, params, X).rank == count(config).identified
    calls.clear()
    size = 1e-9
    with pytest.raises(StructureError) as err:
        structured_rank(config, params, X)
    assert str(err.value) == ("heads of key/value group 1 are not a function of the group's own "
                              "parameters")


def test_rows_must_cover_the_columns_of_Z_and_at_equality_only_W_O_is_identified():
    """B n < c rows is refused with the numbers; at B n = c, Pi = 0: every K_g is zero, the rank is
    d c (the output projection alone) and the bound is sigma_min(Z') itself."""
    config = AttentionConfig(d_model=8, n_heads=2)
    params = init_params(config, 0)
    with pytest.raises(StructureError) as err:
        structured_rank(config, params, random_inputs(config, 1, 7, 0))
    assert str(err.value) == "B * n = 7 rows must be at least the 8 columns of Z'"
    X = random_inputs(config, 1, 8, 0)
    s = structured_rank(config, params, X)
    J = jacobian(config, params, X)
    sv = torch.linalg.svdvals(J)
    assert s.rank == 64 == rank_from_singular_values(sv, tuple(J.shape))[0]
    assert s.block_ranks == (0, 0) and s.factors["min_block_sigma_r"] == math.inf
    assert s.factors["coupled"] == 0.0 and s.factors["a"] == math.inf
    Z = head_outputs(config, params, X).permute(0, 2, 1, 3).reshape(8, 8)
    assert math.isclose(s.factors["uncoupled"], torch.linalg.svdvals(Z).min().item(), rel_tol=1e-12)
    assert s.sigma_r_lower == s.factors["uncoupled"] <= sv[63].item() * (1 + 1e-9)


def test_what_reaches_the_coupled_bound_is_its_definition(monkeypatch):
    """The blocks handed to coupled_lower_bound, against dense SVDs: Sigma_g = the r_g nonzero
    singular values of K_g; (T Sigma)(T Sigma)^T = (U_j^T (x) I) K K^T (U_j (x) I) and the spectrum
    of ||W||^2 (L V)^T (L V) (both free of the basis V); W's singular values ascending, j from
    coupled_directions(H v, B n), B n rows, s = sigma_min(Z')."""
    import idlib.fastrank as fr
    from idlib.attention import unflatten
    config = AttentionConfig(d_model=8, n_heads=4, n_kv_heads=2, bias="qko")
    params, X = _setup(config)
    seen, directions = {}, []
    real_bound, real_directions = fr.coupled_lower_bound, fr.coupled_directions

    def bound(blocks, s_W, j, rows, s):
        seen.update(blocks=blocks, s_W=s_W, j=j, rows=rows, s=s)
        return real_bound(blocks, s_W, j, rows, s)

    def count_directions(hv, rows):
        directions.append((hv, rows))
        return real_directions(hv, rows)

    monkeypatch.setattr(fr, "coupled_lower_bound", bound)
    monkeypatch.setattr(fr, "coupled_directions", count_directions)
    structured_rank(config, params, X)
    B, n = X.shape[0], X.shape[1]
    H, G, m, v, d = config.n_heads, config.n_kv_heads, config.group_size, config.value_dim, config.d_model
    assert directions == [(H * v, B * n)] and seen["rows"] == B * n
    W = params["W_O"].reshape(H * v, d)
    U, sW, _ = torch.linalg.svd(W)
    assert torch.allclose(seen["s_W"], sW.flip(0), rtol=1e-12, atol=0)
    j = seen["j"]
    Uj = U[:, H * v - j:].flip(1)
    theta = flatten(params)

    def zmat(t):
        return head_outputs(config, unflatten(config, t), X).permute(0, 2, 1, 3).reshape(B * n, H * v)

    JZ = torch.func.jacfwd(zmat)(theta)
    Zp = torch.cat([zmat(theta), torch.ones(B * n, 1, dtype=torch.float64)], dim=1)
    Q, R = torch.linalg.qr(Zp)
    assert math.isclose(seen["s"], torch.linalg.svdvals(Zp).min().item(), rel_tol=1e-12)
    for g, (S, TS, ML) in enumerate(seen["blocks"]):
        Jg = JZ[:, g * m * v:(g + 1) * m * v][..., group_parameter_index(config, g)]
        M = torch.einsum("rc,rjp->cjp", Q, Jg)
        K = Jg - torch.einsum("rc,cjp->rjp", Q, M)
        _, sv, Vh = torch.linalg.svd(K.reshape(-1, K.shape[-1]))
        r = S.numel()
        assert torch.allclose(S, sv[:r], rtol=1e-10, atol=0) and sv[r].item() < 1e-12 * sv[0].item()
        KU = torch.einsum("rip,ik->rkp", K, Uj[g * m * v:(g + 1) * m * v]).reshape(-1, K.shape[-1])
        want = KU @ KU.T
        assert torch.allclose(TS @ TS.T, want, rtol=0, atol=1e-10 * want.abs().max().item())
        L = torch.linalg.solve_triangular(R, M.reshape(R.shape[0], -1), upper=True).reshape(-1, K.shape[-1])
        LV = L @ Vh[:r].T
        want = sW[0].item() ** 2 * torch.linalg.eigvalsh(LV.T @ LV).flip(0)
        got = torch.linalg.eigvalsh(ML).flip(0)
        assert torch.allclose(got, want, rtol=0, atol=1e-10 * want.max().item())


def test_structured_rank_takes_factored_rows_where_they_are_cheaper_with_the_same_bound(monkeypatch):
    """factored_is_cheaper is asked per group with (B n, m v, j, r_g); where it says yes, the coupled
    test gets FactoredRows and certifies the same grid point as with the product."""
    import idlib.fastrank as fr
    config = AttentionConfig(d_model=16, n_heads=4, n_kv_heads=2, bias="qkvo")
    params, X = _setup(config)
    plain = structured_rank(config, params, X)
    asked, kinds = [], []
    real_bound = fr.coupled_lower_bound
    monkeypatch.setattr(fr, "factored_is_cheaper", lambda *args: asked.append(args) or True)
    monkeypatch.setattr(fr, "coupled_lower_bound", lambda blocks, *a: (
        kinds.extend(type(TS) for _, TS, _ in blocks), real_bound(blocks, *a))[1])
    factored = structured_rank(config, params, X)
    B, n = X.shape[0], X.shape[1]
    mv, j = config.group_size * config.value_dim, plain.factors["j"]
    assert asked == [(B * n, mv, j, r) for r in plain.block_ranks] and j == 2
    assert kinds == [fr.FactoredRows, fr.FactoredRows]
    assert factored.factors["coupled"] == plain.factors["coupled"] > plain.factors["uncoupled"]
    assert (factored.rank, factored.gap) == (plain.rank, plain.gap)


def test_blocks_of_rank_one_count_in_the_bound():
    """d = 2, two heads of size 1, B n = c + 1 = 3 rows: Pi has rank 1, so each K_g (m v = 1) has
    rank 1; the smallest block sigma_r is the dense one and the rank the dense SVD's."""
    config = AttentionConfig(d_model=2, n_heads=2, head_dim=1)
    params, X = init_params(config, 0), random_inputs(config, 1, 3, 0)
    s = structured_rank(config, params, X)
    want = _dense_factors(config, params, X)
    assert s.block_ranks == want["block_ranks"] == (1, 1)
    assert math.isclose(s.factors["min_block_sigma_r"], want["min_block_sigma_r"], rel_tol=1e-7)
    assert math.isclose(s.factors["uncoupled"], want["uncoupled"], rel_tol=1e-7)
    assert s.rank == _dense(config, params, X)[2]


def test_a_zero_output_projection_gives_a_zero_bound():
    """W_O = 0: sigma_min(W) = 0 exactly, so a = 0 and the uncoupled bound is 0 (not a division by
    zero), the coupled one too: gap 0, nothing certified."""
    config = AttentionConfig(d_model=8, n_heads=2)
    params, X = _setup(config)
    params["W_O"] = torch.zeros_like(params["W_O"])
    s = structured_rank(config, params, X)
    assert s.factors["a"] == 0.0 and s.factors["s"] > 0
    assert (s.factors["uncoupled"], s.factors["coupled"], s.sigma_r_lower, s.gap) == (0.0, 0.0, 0.0, 0.0)


def test_kernel_vectors_are_refined_on_K_itself():
    """Head 0's queries scaled by 30 make the blocks ill-conditioned, so the Gram matrix's
    eigenvectors are off by ~eps lambda_1 / lambda_r; after the refinement step on K, ||J V|| stays
    far below the round-off tolerance (3e-4 of it here; without the step, or with its sign
    flipped, it is ~100 times the tolerance and the gap drops below 1e4)."""
    config = AttentionConfig(d_model=8, n_heads=2)
    params, X = _setup(config)
    params["W_Q"] = params["W_Q"].clone()
    params["W_Q"][0] *= 30
    s = structured_rank(config, params, X)
    assert s.sigma_next_upper < 1e-2 * s.factors["tolerance_upper"]
    assert s.gap >= CERTIFY_GAP and s.rank == count(config).identified


def test_group_config_is_one_group_of_the_layer_and_value_columns_hold_W_V_then_b_V():
    """group_config keeps every field but the head counts (m heads, one key/value head), value_dim
    included; value_columns lists W_V's d v positions then b_V's v, where _group_shapes puts them."""
    from idlib.fastrank import _group_shapes, value_columns
    config = AttentionConfig(d_model=12, n_heads=4, n_kv_heads=2, head_dim=4, value_dim=2, bias="qkv")
    sub = group_config(config)
    assert (sub.n_heads, sub.n_kv_heads, sub.head_dim, sub.value_dim) == (2, 1, 4, 2)
    assert (sub.d_model, sub.bias, sub.causal) == (config.d_model, config.bias, config.causal)
    offsets, at = {}, 0
    for name, shape in _group_shapes(sub):
        offsets[name] = at
        at += math.prod(shape)
    cols = value_columns(sub).tolist()
    assert cols == list(range(offsets["W_V"], offsets["W_V"] + 12 * 2)) + \
        list(range(offsets["b_V"], offsets["b_V"] + 2))


def test_coupled_lower_bound_searches_quarter_octaves_down_then_refines(monkeypatch):
    """Where float32 and float64 agree (the test passes up to lam_top 4^-7 sqrt 2): float32 tries
    lam_top 4^-1, ..., 4^-7, then lo 2 (fails), lo sqrt 2 (passes), lo sqrt 2 2^(1/4) (fails); one
    float64 test certifies lam_top 4^-7 sqrt 2."""
    import idlib.fastrank as fr
    blocks, rows, j, s, s_W, lam_top = _search_problem()
    limit = lam_top * 4.0 ** -7 * 2 ** 0.5 * (1 + 1e-9)
    calls = []
    monkeypatch.setattr(fr, "_coupled_test", lambda bl, lam, *a: calls.append((bl[0][0].dtype, lam))
                        or lam <= limit)
    got = fr.coupled_lower_bound(blocks, s_W, j, rows, s) ** 2
    lo = lam_top * 4.0 ** -7
    want = [lam_top * 4.0 ** -i for i in range(1, 8)] + [lo * 2, lo * 2 ** 0.5, lo * 2 ** 0.5 * 2 ** 0.25]
    assert [dt for dt, _ in calls] == [torch.float32] * 10 + [torch.float64]
    assert [lam for _, lam in calls[:10]] == pytest.approx(want, rel=1e-12)
    assert calls[10][1] == pytest.approx(lo * 2 ** 0.5, rel=1e-12) and got == pytest.approx(lo * 2 ** 0.5, rel=1e-12)


def test_factored_rows_decide_as_their_product():
    """FactoredRows(E, U) in the coupled test = the product (U^T (x) I) E (rows (token, i)): the
    same threshold to 1e-7 on both sides, in float64 and through the float32 search."""
    from idlib.fastrank import FactoredRows, _coupled_test, coupled_lower_bound
    gen = torch.Generator().manual_seed(5)
    rows, mv, j, r = 3, 2, 3, 5
    factored, product = [], []
    for S, _, ML in _synthetic_blocks(seed=2, rows=rows, j=j, r=r):
        E = 0.3 * torch.randn(rows * mv, r, generator=gen, dtype=torch.float64)
        U = torch.randn(mv, j, generator=gen, dtype=torch.float64)
        TS = torch.einsum("rap,ak->rkp", E.reshape(rows, mv, r), U).reshape(rows * j, r)
        factored.append((S, FactoredRows(E, U), ML))
        product.append((S, TS, ML))
    alpha, s = 1.5, 50.0
    delta = torch.tensor([0.9, 0.4, 0.1], dtype=torch.float64)
    star = _threshold(product, alpha, delta, rows, s, hi=min(s * s / 2, alpha))
    assert 0 < star
    for blocks in (factored, product):
        assert _coupled_test(blocks, star * (1 - 1e-7), alpha, delta, rows, s)
        assert not _coupled_test(blocks, star * (1 + 1e-7), alpha, delta, rows, s)
    s_W = torch.tensor([0.2, 0.7, 1.0, 1.3, 2.0], dtype=torch.float64)
    assert coupled_lower_bound(factored, s_W, j, rows, s) == coupled_lower_bound(product, s_W, j, rows, s) > 0


def test_factored_rows_are_taken_where_they_are_cheaper():
    """d = 128, H = 16 (B n = 910, m v = 8, j = 16, r_g ~ 2,900): factored, ~3.5x fewer flops;
    d = 45, H = 5 (m v = 9 > j = 6) and 4 key/value groups at d = 128 (m v = 32): the product."""
    from idlib.fastrank import factored_is_cheaper
    assert factored_is_cheaper(910, 8, 16, 2944)
    assert not factored_is_cheaper(329, 9, 6, 1053)
    assert not factored_is_cheaper(910, 32, 16, 5888)
    assert not factored_is_cheaper(100, 8, 8, 300)


@pytest.mark.xfail(strict=True, raises=torch.linalg.LinAlgError,
                   reason="known defect: with sigma_min(Z') = 0 the lift's Cholesky factorisation fails "
                          "instead of the route reporting no certificate (README, mutation score)")
def test_a_zero_value_column_gives_no_certificate_rather_than_an_error():
    """A value column of zeros makes Z' singular (sigma_min(Z') = 0 exactly); the dense route
    measures the layer, the structured one should say it cannot certify it."""
    config = AttentionConfig(d_model=8, n_heads=2)
    params, X = _setup(config)
    params["W_V"] = params["W_V"].clone()
    params["W_V"][0, :, 0] = 0.0
    assert measure(config, params=params, method="dense").certified
    s = structured_rank(config, params, X)
    assert s.factors["s"] == 0.0 and s.gap < CERTIFY_GAP
