"""Training along the orbit: overlap, conserved quantities, rebalancing (chapter 6)."""
import copy

import pytest
import torch

from idlib.studies import training as T
from idlib.attention import flatten, forward, init_params, n_params, random_inputs, unflatten
from idlib.config import AttentionConfig
from idlib.symmetry import orbit_generators, random_group_element, tangent_basis

torch.set_num_threads(1)

FAST = [AttentionConfig(8, n_heads=2),
        AttentionConfig(8, n_heads=4, n_kv_heads=2, head_dim=4),
        AttentionConfig(8, n_heads=2, rope_fraction=0.5),
        AttentionConfig(6, n_heads=3, n_kv_heads=1, head_dim=2, value_dim=3, bias="qo")]
ALL = FAST + [AttentionConfig(8, n_heads=2, bias="qkvo"),
              AttentionConfig(8, n_heads=4, n_kv_heads=2, head_dim=4, rope_fraction=0.5, bias="qk")]
IDS = lambda cfgs: [f"d{c.d_model}H{c.n_heads}G{c.n_kv_heads}r{c.rotary_dim}b{c.bias}" for c in cfgs]  # noqa: E731


def point(cfg, seed=0):
    return init_params(cfg, seed)


def grad_at(task, params, seed=0):
    p = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    task.loss(p, task.sample(torch.Generator().manual_seed(seed), 16)).backward()
    return {k: v.grad for k, v in p.items()}


@pytest.mark.parametrize("cfg", FAST, ids=IDS(FAST))
def test_closed_form_generators_equal_symmetry(cfg):
    p = point(cfg)
    assert torch.allclose(T.generators(cfg, p), orbit_generators(cfg, p), atol=1e-12, rtol=0)


@pytest.mark.parametrize("cfg", ALL, ids=IDS(ALL))
def test_tangent_projection_matches_basis(cfg):
    p = point(cfg, 1)
    P = tangent_basis(cfg, p)
    assert T.tangent(cfg, p).shape == P.shape
    u = torch.randn(n_params(cfg), generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert torch.allclose(T.tangent_part(cfg, p, u), P @ (P.T @ u), atol=1e-10, rtol=0)
    ov = T.overlap(cfg, p, u)
    assert ov == pytest.approx(T.overlap(cfg, p, u, P), abs=1e-10)
    # a tangent vector is all tangent, a vector orthogonal to T not at all
    assert T.overlap(cfg, p, P[:, 0])["total"] == pytest.approx(1.0, abs=1e-10)
    assert T.overlap(cfg, p, u - P @ (P.T @ u))["total"] < 1e-10


def test_random_share_is_the_count_ratio():
    cfg = AttentionConfig(16, n_heads=4)          # u = 4 (16 + 16) = 128 of n = 1024
    assert T.random_share(cfg)["total"] == pytest.approx((128 / 1024) ** 0.5, abs=1e-15)


TASKS = [T.teacher_student(AttentionConfig(8, n_heads=4, n_kv_heads=2, head_dim=4, bias="qo")),
         T.associative_recall(AttentionConfig(16, n_heads=4))]


@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_gradient_is_orthogonal_to_the_orbit(task):
    p = point(task.config, 2)
    g = flatten(grad_at(task, p))
    assert g.norm() > 1e-3
    assert T.overlap(task.config, p, g)["total"] < 1e-12


@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_sgd_step_changes_conserved_quantity_at_second_order_exactly(task):
    """C(theta - eta g) - C(theta) = eta^2 C(g): the first-order term vanishes identically."""
    cfg, eta = task.config, 0.3
    p = point(cfg, 4)
    g = grad_at(task, p)
    stepped = {k: p[k] - eta * g[k] for k in p}
    c0, c1, cg = T.conserved(cfg, p), T.conserved(cfg, stepped), T.conserved(cfg, g)
    for comp in ("qk", "vo"):
        assert torch.allclose(c1[comp] - c0[comp], eta ** 2 * cg[comp], atol=1e-10, rtol=0)
        assert cg[comp].norm() > 1e-6


def test_conserved_quantity_gqa_sums_query_heads():
    cfg = AttentionConfig(8, n_heads=4, n_kv_heads=2, head_dim=4)
    p = point(cfg)
    c = T.conserved(cfg, p)["qk"]
    WQ, WK = p["W_Q"], p["W_K"]
    expected = WQ[2].T @ WQ[2] + WQ[3].T @ WQ[3] - WK[1].T @ WK[1]
    assert torch.allclose(c[1], expected, atol=1e-14, rtol=0)
    WO, WV = p["W_O"], p["W_V"]
    vo = WV[0].T @ WV[0] - WO[0] @ WO[0].T - WO[1] @ WO[1].T
    assert torch.allclose(T.conserved(cfg, p)["vo"][0], vo, atol=1e-14, rtol=0)


def test_balancing_factor_solves_the_balance_equation():
    gen = torch.Generator().manual_seed(0)
    A, B = (torch.randn(3, 5, 5, generator=gen, dtype=torch.float64) for _ in range(2))
    P, Q = A @ A.mT + 0.1 * torch.eye(5), B @ B.mT + 0.1 * torch.eye(5)
    S = T.balancing_factor(P, Q)
    S_inv = torch.linalg.inv(S)
    assert torch.allclose(S, S.mT, atol=1e-14, rtol=0)
    assert bool((torch.linalg.eigvalsh(S) > 0).all())
    assert torch.allclose(S @ P @ S, S_inv @ Q @ S_inv, atol=1e-10, rtol=0)


@pytest.mark.parametrize("cfg", ALL, ids=IDS(ALL))
def test_balance_keeps_function_and_zeroes_conserved(cfg):
    p = point(cfg, 5)
    X = random_inputs(cfg, 4, 7, seed=1)
    b = T.balance(cfg, p)
    assert (forward(cfg, b, X) - forward(cfg, p, X)).abs().max() < 1e-10
    for comp, c in T.conserved(cfg, b).items():
        assert c.abs().max() < 1e-10, comp
    assert T.conserved(cfg, p)["qk"].abs().max() > 0.1      # it was not balanced before


def test_balanced_point_has_least_norm_on_its_orbit():
    cfg = AttentionConfig(8, n_heads=4, n_kv_heads=2, head_dim=4)
    b = T.balance(cfg, point(cfg, 6))
    for seed in range(5):
        moved = random_group_element(cfg, b, seed=seed, scale=0.3)
        assert flatten(moved).norm() > flatten(b).norm()


def test_balance_refuses_rank_deficient_factor():
    cfg = AttentionConfig(8, n_heads=2)
    p = point(cfg)
    p["W_K"] = p["W_K"].clone()
    p["W_K"][0, :, 0] = 0.0
    with pytest.raises(ValueError, match="positive definite"):
        T.balance(cfg, p)


def _adam_like_step(cfg, p, scale, seed=7):
    """A step with a large tangent part (a sign-like per-coordinate update)."""
    u = torch.randn(n_params(cfg), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return unflatten(cfg, flatten(p) + scale * torch.sign(u))


@pytest.mark.parametrize("cfg", FAST + ALL[-1:], ids=IDS(FAST + ALL[-1:]))
def test_orbit_projection_keeps_function_and_removes_tangent_to_first_order(cfg):
    p = point(cfg, 8)
    X = random_inputs(cfg, 4, 7, seed=2)
    shares = []
    for scale in (1e-3, 5e-4):
        new = _adam_like_step(cfg, p, scale)
        proj = T.project_step(cfg, p, new)
        assert (forward(cfg, proj, X) - forward(cfg, new, X)).abs().max() < 1e-10
        raw = T.overlap(cfg, p, flatten(new) - flatten(p))["total"]
        shares.append(T.overlap(cfg, p, flatten(proj) - flatten(p))["total"])
        assert raw > 0.1 and shares[-1] < 0.02 * raw
    assert shares[1] / shares[0] == pytest.approx(0.5, abs=0.1)   # the remainder is O(|D|)


def test_linear_projection_is_exactly_orthogonal_and_moves_function_at_second_order():
    cfg = AttentionConfig(8, n_heads=2)
    p = point(cfg, 9)
    X = random_inputs(cfg, 4, 7, seed=2)
    changes = []
    for scale in (1e-3, 5e-4):
        new = _adam_like_step(cfg, p, scale)
        lin = T.project_step(cfg, p, new, mode="linear")
        assert T.overlap(cfg, p, flatten(lin) - flatten(p))["total"] < 1e-10
        changes.append(float((forward(cfg, lin, X) - forward(cfg, new, X)).abs().max()))
    assert changes[0] > 1e-8
    assert changes[1] / changes[0] == pytest.approx(0.25, abs=0.05)
    with pytest.raises(ValueError, match="mode='nope' must be 'orbit' or 'linear'"):
        T.project_step(cfg, p, new, mode="nope")


@pytest.mark.parametrize("mode", ["project", "balance"])
def test_rebalanced_wraps_a_torch_optimizer(mode):
    task = TASKS[0]
    cfg = task.config
    X = task.eval_batch[0][:8]
    base = {k: v.clone().requires_grad_(True) for k, v in point(cfg, 10).items()}
    twin = {k: v.detach().clone().requires_grad_(True) for k, v in base.items()}
    plain = torch.optim.Adam(list(base.values()), lr=1e-2)
    wrapped = T.Rebalanced(torch.optim.Adam(list(twin.values()), lr=1e-2), cfg, twin, mode)
    batch = task.sample(torch.Generator().manual_seed(0), 16)
    for opt, ps in ((plain, base), (wrapped, twin)):
        opt.zero_grad()
        task.loss(ps, batch).backward()
        opt.step()
    a = {k: v.detach() for k, v in base.items()}
    b = {k: v.detach() for k, v in twin.items()}
    assert (forward(cfg, a, X) - forward(cfg, b, X)).abs().max() < 1e-10
    assert (flatten(a) - flatten(b)).norm() > 1e-6                 # it did move the parameters
    if mode == "balance":
        assert all(c.abs().max() < 1e-10 for c in T.conserved(cfg, b).values())


def test_errors_name_the_field():
    cfg = AttentionConfig(8, n_heads=2)
    with pytest.raises(ValueError, match="mode='x' must be None, 'project' or 'balance'"):
        T.Rebalanced(torch.optim.SGD([torch.zeros(1)], lr=1.0), cfg, {}, "x")
    with pytest.raises(ValueError, match="optimizer='rmsprop' must be one of"):
        T.make_optimizer("rmsprop", [torch.zeros(1)], 1.0)
    with pytest.raises(ValueError, match="n_keys=5 must be at most d_model / 2 = 4"):
        T.associative_recall(cfg, n_keys=5)


def test_train_is_deterministic_and_sgd_stays_off_the_orbit():
    task = TASKS[0]
    h1 = T.train(task, "sgd", 0.02, 6, seed=3, track_overlap=True, eval_every=3)
    h2 = T.train(task, "sgd", 0.02, 6, seed=3, track_overlap=True, eval_every=3)
    assert h1.eval_loss == h2.eval_loss and h1.eval_steps == [0, 3, 6]
    assert max(h1.overlap["total"]) < 1e-12 and max(h1.grad_overlap) < 1e-12
    assert h1.eval_loss[-1] < h1.eval_loss[0]
    ha = T.train(task, "adam", 0.01, 6, seed=3, track_overlap=True)
    assert min(ha.overlap["total"]) > 0.05
    hb = T.train(task, "adam", 0.01, 6, seed=3, rebalance="balance")
    c0 = torch.cat([c.reshape(-1) for c in T.conserved(task.config, point(task.config, 3)).values()])
    assert hb.drift["total"][-1] == pytest.approx(float(c0.norm()), abs=1e-10)


def test_mean_std():
    assert T.mean_std([1.0, 3.0]) == pytest.approx((2.0, 2 ** 0.5))
    assert copy.copy(T.mean_std([4.0])) == (4.0, 0.0)


def test_variants_are_refused_by_name():
    cfg = AttentionConfig(8, n_heads=2, qk_norm="plain")
    with pytest.raises(ValueError, match="qk_norm='plain' must be 'none'"):
        T.conserved(cfg, init_params(cfg, 0))
    with pytest.raises(ValueError, match="qk_norm='plain' must be 'none'"):
        T.balance(cfg, init_params(cfg, 0))
