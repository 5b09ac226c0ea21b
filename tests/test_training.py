"""idlib.studies.training: tasks, optimizers, rebalanced optimizers and recorded runs (chapter 6)."""
import copy

import pytest
import torch

from idlib import conservation
from idlib.studies import training as T
from idlib.attention import flatten, forward, init_params
from idlib.config import AttentionConfig

torch.set_num_threads(1)


TASKS = [T.teacher_student(AttentionConfig(8, n_heads=4, n_kv_heads=2, head_dim=4, bias="qo")),
         T.associative_recall(AttentionConfig(16, n_heads=4))]


@pytest.mark.parametrize("mode", ["project", "balance"])
def test_rebalanced_wraps_a_torch_optimizer(mode):
    task = TASKS[0]
    cfg = task.config
    X = task.eval_batch[0][:8]
    base = {k: v.clone().requires_grad_(True) for k, v in init_params(cfg, 10).items()}
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
        assert all(c.abs().max() < 1e-10 for c in conservation.conserved(cfg, b).values())


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
    c0 = torch.cat([c.reshape(-1) for c in conservation.conserved(task.config, init_params(task.config, 3)).values()])
    assert hb.drift["total"][-1] == pytest.approx(float(c0.norm()), abs=1e-10)


def test_mean_std():
    assert T.mean_std([1.0, 3.0]) == pytest.approx((2.0, 2 ** 0.5))
    assert copy.copy(T.mean_std([4.0])) == (4.0, 0.0)


def test_gradient_is_the_loss_derivative_and_leaves_params_alone():
    """gradient(task, params, batch) = dL/dtheta (checked against a central difference along one
    coordinate, to 1e-6 relative) and returns fresh tensors: params keep no grad and stay equal."""
    cfg = AttentionConfig(8, n_heads=2)
    task = T.teacher_student(cfg)
    params = init_params(cfg, 3)
    kept = copy.deepcopy(params)
    batch = task.sample(torch.Generator().manual_seed(0), 4)
    g = T.gradient(task, params, batch)
    assert set(g) == set(params) and all(g[k].shape == params[k].shape for k in params)
    assert all(params[k].grad is None and torch.equal(params[k], kept[k]) for k in params)
    h = 1e-5
    for name in ("W_Q", "W_O"):
        e = torch.zeros_like(params[name]).reshape(-1)
        e[5] = h
        up = dict(params, **{name: params[name] + e.reshape(params[name].shape)})
        down = dict(params, **{name: params[name] - e.reshape(params[name].shape)})
        fd = (task.loss(up, batch) - task.loss(down, batch)).item() / (2 * h)
        assert fd == pytest.approx(g[name].reshape(-1)[5].item(), rel=1e-6)
