"""idlib.conservation: projection onto the orbit tangent, conserved quantities, balancing (chapter 6)."""
import re

import pytest
import torch

from idlib import conservation as C
from idlib.attention import flatten, forward, init_params, n_params, random_inputs, unflatten
from idlib.config import AttentionConfig
from idlib.counting import count
from idlib.studies.training import associative_recall, gradient, teacher_student
from idlib.symmetry import random_group_element, tangent_basis

torch.set_num_threads(1)

FAST = [AttentionConfig(8, n_heads=2),
        AttentionConfig(8, n_heads=4, n_kv_heads=2, head_dim=4),
        AttentionConfig(8, n_heads=2, rope_fraction=0.5),
        AttentionConfig(6, n_heads=3, n_kv_heads=1, head_dim=2, value_dim=3, bias="qo")]
ALL = FAST + [AttentionConfig(8, n_heads=2, bias="qkvo"),
              AttentionConfig(8, n_heads=4, n_kv_heads=2, head_dim=4, rope_fraction=0.5, bias="qk")]
IDS = lambda cfgs: [f"d{c.d_model}H{c.n_heads}G{c.n_kv_heads}r{c.rotary_dim}b{c.bias}" for c in cfgs]  # noqa: E731


@pytest.mark.parametrize("cfg", ALL, ids=IDS(ALL))
def test_tangent_projection_matches_basis(cfg):
    p = init_params(cfg, 1)
    P = tangent_basis(cfg, p)
    u = torch.randn(n_params(cfg), generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert torch.allclose(C.tangent_part(cfg, p, u), P @ (P.T @ u), atol=1e-10, rtol=0)
    ov = C.overlap(cfg, p, u)
    assert ov == pytest.approx(C.overlap(cfg, p, u, P), abs=1e-10)
    # a tangent vector is all tangent, a vector orthogonal to T not at all
    assert C.overlap(cfg, p, P[:, 0])["total"] == pytest.approx(1.0, abs=1e-10)
    assert C.overlap(cfg, p, u - P @ (P.T @ u))["total"] < 1e-10


def test_random_share_is_the_count_ratio():
    cfg = AttentionConfig(16, n_heads=4)          # u = 4 (16 + 16) = 128 of n = 1024
    assert C.random_share(cfg)["total"] == pytest.approx((128 / 1024) ** 0.5, abs=1e-15)


TASKS = [teacher_student(AttentionConfig(8, n_heads=4, n_kv_heads=2, head_dim=4, bias="qo")),
         associative_recall(AttentionConfig(16, n_heads=4))]


@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_gradient_is_orthogonal_to_the_orbit(task):
    p = init_params(task.config, 2)
    g = flatten(gradient(task, p, task.sample(torch.Generator().manual_seed(0), 16)))
    assert g.norm() > 1e-3
    assert C.overlap(task.config, p, g)["total"] < 1e-12


@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_sgd_step_changes_conserved_quantity_at_second_order_exactly(task):
    """C(theta - eta g) - C(theta) = eta^2 C(g): the first-order term vanishes identically."""
    cfg, eta = task.config, 0.3
    p = init_params(cfg, 4)
    g = gradient(task, p, task.sample(torch.Generator().manual_seed(0), 16))
    stepped = {k: p[k] - eta * g[k] for k in p}
    c0, c1, cg = C.conserved(cfg, p), C.conserved(cfg, stepped), C.conserved(cfg, g)
    for comp in ("qk", "vo"):
        assert torch.allclose(c1[comp] - c0[comp], eta ** 2 * cg[comp], atol=1e-10, rtol=0)
        assert cg[comp].norm() > 1e-6


def test_conserved_quantity_gqa_sums_query_heads():
    cfg = AttentionConfig(8, n_heads=4, n_kv_heads=2, head_dim=4)
    p = init_params(cfg)
    c = C.conserved(cfg, p)["qk"]
    WQ, WK = p["W_Q"], p["W_K"]
    expected = WQ[2].T @ WQ[2] + WQ[3].T @ WQ[3] - WK[1].T @ WK[1]
    assert torch.allclose(c[1], expected, atol=1e-14, rtol=0)
    WO, WV = p["W_O"], p["W_V"]
    vo = WV[0].T @ WV[0] - WO[0] @ WO[0].T - WO[1] @ WO[1].T
    assert torch.allclose(C.conserved(cfg, p)["vo"][0], vo, atol=1e-14, rtol=0)


def test_balancing_factor_solves_the_balance_equation():
    gen = torch.Generator().manual_seed(0)
    A, B = (torch.randn(3, 5, 5, generator=gen, dtype=torch.float64) for _ in range(2))
    P, Q = A @ A.mT + 0.1 * torch.eye(5), B @ B.mT + 0.1 * torch.eye(5)
    S = C.balancing_factor(P, Q)
    S_inv = torch.linalg.inv(S)
    assert torch.allclose(S, S.mT, atol=1e-14, rtol=0)
    assert bool((torch.linalg.eigvalsh(S) > 0).all())
    assert torch.allclose(S @ P @ S, S_inv @ Q @ S_inv, atol=1e-10, rtol=0)


@pytest.mark.parametrize("cfg", ALL, ids=IDS(ALL))
def test_balance_keeps_function_and_zeroes_conserved(cfg):
    p = init_params(cfg, 5)
    X = random_inputs(cfg, 4, 7, seed=1)
    b = C.balance(cfg, p)
    assert (forward(cfg, b, X) - forward(cfg, p, X)).abs().max() < 1e-10
    for comp, c in C.conserved(cfg, b).items():
        assert c.abs().max() < 1e-10, comp
    assert C.conserved(cfg, p)["qk"].abs().max() > 0.1      # it was not balanced before


def test_balanced_point_has_least_norm_on_its_orbit():
    cfg = AttentionConfig(8, n_heads=4, n_kv_heads=2, head_dim=4)
    b = C.balance(cfg, init_params(cfg, 6))
    for seed in range(5):
        moved = random_group_element(cfg, b, seed=seed, scale=0.3)
        assert flatten(moved).norm() > flatten(b).norm()


def test_balance_refuses_rank_deficient_factor():
    cfg = AttentionConfig(8, n_heads=2)
    p = init_params(cfg)
    p["W_K"] = p["W_K"].clone()
    p["W_K"][0, :, 0] = 0.0
    with pytest.raises(ValueError, match=r"^matrix must be positive definite \(a factor of the layer has lost rank\)$"):
        C.balance(cfg, p)


def _adam_like_step(cfg, p, scale, seed=7):
    """A step with a large tangent part (a sign-like per-coordinate update)."""
    u = torch.randn(n_params(cfg), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return unflatten(cfg, flatten(p) + scale * torch.sign(u))


@pytest.mark.parametrize("cfg", FAST + ALL[-1:], ids=IDS(FAST + ALL[-1:]))
def test_orbit_projection_keeps_function_and_removes_tangent_to_first_order(cfg):
    p = init_params(cfg, 8)
    X = random_inputs(cfg, 4, 7, seed=2)
    shares = []
    for scale in (1e-3, 5e-4):
        new = _adam_like_step(cfg, p, scale)
        proj = C.project_step(cfg, p, new)
        assert (forward(cfg, proj, X) - forward(cfg, new, X)).abs().max() < 1e-10
        raw = C.overlap(cfg, p, flatten(new) - flatten(p))["total"]
        shares.append(C.overlap(cfg, p, flatten(proj) - flatten(p))["total"])
        assert raw > 0.1 and shares[-1] < 0.02 * raw
    assert shares[1] / shares[0] == pytest.approx(0.5, abs=0.1)   # the remainder is O(|D|)


def test_linear_projection_is_exactly_orthogonal_and_moves_function_at_second_order():
    cfg = AttentionConfig(8, n_heads=2)
    p = init_params(cfg, 9)
    X = random_inputs(cfg, 4, 7, seed=2)
    changes = []
    for scale in (1e-3, 5e-4):
        new = _adam_like_step(cfg, p, scale)
        lin = C.project_step(cfg, p, new, mode="linear")
        assert C.overlap(cfg, p, flatten(lin) - flatten(p))["total"] < 1e-10
        changes.append(float((forward(cfg, lin, X) - forward(cfg, new, X)).abs().max()))
    assert changes[0] > 1e-8
    assert changes[1] / changes[0] == pytest.approx(0.25, abs=0.05)
    with pytest.raises(ValueError, match="project_step: mode='nope' must be one of 'orbit', 'linear'"):
        C.project_step(cfg, p, new, mode="nope")


def test_variants_are_refused_by_name():
    cfg = AttentionConfig(8, n_heads=2, qk_norm="plain")
    with pytest.raises(ValueError, match=r"^variant\(s\) qk_norm \(qk_norm\): idlib.conservation treats "
                       r"one plain attention layer \(its moment maps and balancing are derived for it\)$"):
        C.conserved(cfg, init_params(cfg, 0))
    with pytest.raises(ValueError, match=r"variant\(s\) qk_norm \(qk_norm\)"):
        C.balance(cfg, init_params(cfg, 0))
    for kw, rows in ((dict(n_layers=2), "stack (n_layers, kv_share)"),
                     (dict(input_centered=True), "centred (input_centered)"),
                     (dict(sinks=True, alibi=True), "alibi (alibi), sinks (sinks)")):
        cfg = AttentionConfig(8, n_heads=2, **kw)
        with pytest.raises(ValueError, match=r"^variant\(s\) " + re.escape(rows) + ":"):
            C.check_supported(cfg)
    C.check_supported(AttentionConfig(8, n_heads=2, bias="qkvo", rope_fraction=1.0, causal=True,
                                      softcap=30.0))


# --- exact values per component, biases, custom frequencies, k > d ----------------------------

BIASED = AttentionConfig(8, n_heads=2, value_dim=2, bias="qkvo")          # k = 4, v = 2


def test_component_rows_and_random_share_per_component():
    rows = C.component_rows(BIASED)
    # qk: W_Q, W_K (2 * 2 * 8 * 4) + b_Q, b_K (8 + 8); vo: W_V, W_O (2 * 2 * 8 * 2) + b_V (4) + b_O (8)
    assert (int(rows["qk"].sum()), int(rows["vo"].sum())) == (144, 76)
    assert bool((rows["qk"] ^ rows["vo"]).all())               # a partition of the parameters
    # an isotropic update's expected share is sqrt(dim T_c / n_c); dim T_c read off the basis
    P = tangent_basis(BIASED, init_params(BIASED, 0))
    share = C.random_share(BIASED)
    for comp, mask in rows.items():
        assert share[comp] == pytest.approx((float(P[mask].pow(2).sum()) / int(mask.sum())) ** 0.5,
                                            abs=1e-12)
    assert share["qk"] != pytest.approx(share["vo"], abs=1e-3)   # the components differ here


def test_overlap_per_component():
    p = init_params(BIASED, 1)
    P = tangent_basis(BIASED, p)
    rows = C.component_rows(BIASED)
    u = torch.randn(n_params(BIASED), generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    only_qk = torch.where(rows["qk"], u, torch.zeros_like(u))
    ov = C.overlap(BIASED, p, only_qk)
    proj = P @ (P.T @ only_qk)
    assert ov["vo"] == 0.0                                     # no update there: share 0
    assert ov["qk"] == pytest.approx(float(proj[rows["qk"]].norm() / only_qk[rows["qk"]].norm()),
                                     abs=1e-10)
    assert ov["total"] == pytest.approx(float(proj.norm() / only_qk.norm()), abs=1e-10)
    assert 0.05 < ov["qk"] < 0.95


def test_moment_maps_include_the_biases():
    p = init_params(BIASED, 2)
    c = C.conserved(BIASED, p)
    Qt = torch.cat([p["W_Q"][1], p["b_Q"][1][None]])
    Kt = torch.cat([p["W_K"][1], p["b_K"][1][None]])
    Vt = torch.cat([p["W_V"][0], p["b_V"][0][None]])
    assert torch.allclose(c["qk"][1], Qt.T @ Qt - Kt.T @ Kt, atol=1e-14, rtol=0)
    assert torch.allclose(c["vo"][0], Vt.T @ Vt - p["W_O"][0] @ p["W_O"][0].T, atol=1e-14, rtol=0)


def test_spd_power_refuses_an_exactly_singular_matrix():
    with pytest.raises(ValueError, match="positive definite"):
        C.spd_power(torch.diag(torch.tensor([1.0, 0.0], dtype=torch.float64)), 0.5)
    M = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64)
    assert torch.allclose(C.spd_power(M, 0.5) @ C.spd_power(M, 0.5), M, atol=1e-14, rtol=0)


ROPE = AttentionConfig(6, n_heads=1, head_dim=4, rope_fraction=1.0)
EQUAL = torch.tensor([0.7, 0.7], dtype=torch.float64)       # two equal planes: commutant 8, not 4


def test_custom_frequencies_reach_every_function():
    p = init_params(ROPE, 3)
    X = random_inputs(ROPE, 4, 7, seed=2)
    P = tangent_basis(ROPE, p, EQUAL)
    assert P.shape[1] == 24 and tangent_basis(ROPE, p).shape[1] == 20
    u = torch.randn(n_params(ROPE), generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert torch.allclose(C.tangent_part(ROPE, p, u, EQUAL), P @ (P.T @ u), atol=1e-10, rtol=0)
    rope_v = AttentionConfig(6, n_heads=1, head_dim=4, rope_fraction=1.0, bias="v")   # a b_V block
    pv = init_params(rope_v, 3)
    Pv = tangent_basis(rope_v, pv, EQUAL)
    uv = torch.randn(n_params(rope_v), generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert torch.allclose(C.tangent_part(rope_v, pv, uv, EQUAL), Pv @ (Pv.T @ uv), atol=1e-10, rtol=0)
    # the projection onto the larger commutant keeps more of the QK moment map
    default, equal = C.conserved(ROPE, p)["qk"], C.conserved(ROPE, p, EQUAL)["qk"]
    assert equal.norm() > default.norm() + 1e-3
    b = C.balance(ROPE, p, EQUAL)
    assert (forward(ROPE, b, X, EQUAL) - forward(ROPE, p, X, EQUAL)).abs().max() < 1e-10
    assert all(c.abs().max() < 1e-10 for c in C.conserved(ROPE, b, EQUAL).values())
    assert C.conserved(ROPE, C.balance(ROPE, p), EQUAL)["qk"].abs().max() > 1e-3
    new = _adam_like_step(ROPE, p, 1e-3)
    for mode in ("orbit", "linear"):
        proj = C.project_step(ROPE, p, new, mode, EQUAL)
        share = C.overlap(ROPE, p, flatten(proj) - flatten(p), P)["total"]
        assert share < 0.02 * C.overlap(ROPE, p, flatten(new) - flatten(p), P)["total"]


WIDE = AttentionConfig(3, n_heads=1, head_dim=5, value_dim=4, bias="q")     # k, v > d: null moves


def test_projection_with_null_moves():
    p = init_params(WIDE, 4)
    P = tangent_basis(WIDE, p)
    assert P.shape[1] == count(WIDE).unidentified
    u = torch.randn(n_params(WIDE), generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    assert torch.allclose(C.tangent_part(WIDE, p, u), P @ (P.T @ u), atol=1e-10, rtol=0)
    X = random_inputs(WIDE, 4, 5, seed=3)
    new = _adam_like_step(WIDE, p, 1e-3)
    proj = C.project_step(WIDE, p, new)
    assert (forward(WIDE, proj, X) - forward(WIDE, new, X)).abs().max() < 1e-10
    assert C.overlap(WIDE, p, flatten(proj) - flatten(p), P)["total"] < 0.02


def test_drift_is_the_frobenius_norm_of_the_change():
    start = {"qk": torch.zeros(2, 2, dtype=torch.float64), "vo": torch.ones(1, 2, dtype=torch.float64)}
    now = {"qk": torch.tensor([[3.0, 0.0], [0.0, 0.0]], dtype=torch.float64),
           "vo": torch.tensor([[1.0, 5.0]], dtype=torch.float64)}
    assert C.drift(now, start) == {"qk": 3.0, "vo": 4.0, "total": 5.0}
    assert C.drift(start, start) == {"qk": 0.0, "vo": 0.0, "total": 0.0}
