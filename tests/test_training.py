"""idlib.studies.training: tasks, optimizers, rebalanced optimizers and recorded runs (chapter 6)."""
import copy

import pytest
import torch

from idlib import conservation
from idlib.studies import training as T
from idlib.attention import flatten, forward, init_params
from idlib.config import AttentionConfig

torch.set_num_threads(1)

def point(cfg, seed=0):
    return init_params(cfg, seed)


def grad_at(task, params, seed=0):
    p = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    task.loss(p, task.sample(torch.Generator().manual_seed(seed), 16)).backward()
    return {k: v.grad for k, v in p.items()}


TASKS = [T.teacher_student(AttentionConfig(8, n_heads=4, n_kv_heads=2, head_dim=4, bias="qo")),
         T.associative_recall(AttentionConfig(16, n_heads=4))]


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
    c0 = torch.cat([c.reshape(-1) for c in conservation.conserved(task.config, point(task.config, 3)).values()])
    assert hb.drift["total"][-1] == pytest.approx(float(c0.norm()), abs=1e-10)


def test_mean_std():
    assert T.mean_std([1.0, 3.0]) == pytest.approx((2.0, 2 ** 0.5))
    assert copy.copy(T.mean_std([4.0])) == (4.0, 0.0)
