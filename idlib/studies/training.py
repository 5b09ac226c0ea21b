"""Training runs for chapter 6: two tasks, four optimizers, rebalanced optimizers, and a record
of what each run did along the orbit.

* ``Task``s whose loss depends on the parameters only through the layer's function:
  ``teacher_student`` (regression onto a random layer) and ``associative_recall``.
* ``Rebalanced`` wraps any torch optimizer and, after each step, removes the step's tangent
  part (``conservation.project_step``) or moves to the balanced point (``conservation.balance``).
* ``train`` runs one optimizer on a task and records a ``History`` (held-out loss, the share of
  each update in the orbit tangent, the drift of the conserved quantities C); ``train_runs``
  trains several runs in order; ``gradient`` is one loss gradient on a given batch.
* The chapter's knobs: ``PROFILES`` (the values of the profile-dependent knobs) and the rules
  its parameters cell checks them with (``LAYER``, ``RATES``, ``keys_rule``, ``pairs_rule``),
  so that a wrong knob fails in the first cell, naming it.

The machinery (projection onto T_theta O, the moment maps, balancing) is the core module
:mod:`idlib.conservation`; this module only runs it.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Callable

from ..lazy import torch
from tqdm import tqdm

from ..attention import Params, flatten, forward, init_params, random_inputs
from ..config import AttentionConfig
from ..conservation import (balance, check_supported, conserved, drift, overlap,
                            project_step)
from ..report.parameters import POSITIVE_INT, POSITIVE_REAL, Rule, layer


class Rebalanced:
    """Wrap any torch.optim optimizer over the tensors of a parameter dict; after each inner
    step apply mode='project' (:func:`project_step`, orbit mode) or mode='balance'
    (:func:`balance`, every ``every`` steps), or nothing (mode=None)."""

    def __init__(self, optimizer: torch.optim.Optimizer, config: AttentionConfig,
                 params: dict[str, torch.Tensor], mode: str | None = None, every: int = 1,
                 frequencies: torch.Tensor | None = None) -> None:
        if mode not in (None, "project", "balance"):
            raise ValueError(f"mode={mode!r} must be None, 'project' or 'balance'")
        self.optimizer, self.config, self.params = optimizer, config, params
        self.mode, self.every, self.frequencies, self.n_steps = mode, every, frequencies, 0

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def _values(self) -> Params:
        return {name: p.detach().clone() for name, p in self.params.items()}

    def step(self, closure: Callable | None = None):
        old = self._values() if self.mode == "project" else None
        loss = self.optimizer.step(closure)
        self.n_steps += 1
        if self.mode == "project":
            new = project_step(self.config, old, self._values(), "orbit", self.frequencies)
        elif self.mode == "balance" and self.n_steps % self.every == 0:
            new = balance(self.config, self._values(), self.frequencies)
        else:
            return loss
        with torch.no_grad():
            for name, p in self.params.items():
                p.copy_(new[name])
        return loss


# --- tasks ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Task:
    """A loss on the layer's parameters that depends on them only through the layer's function.

    ``sample(gen, batch_size)`` draws a training batch; ``loss(params, batch)`` is the mean loss;
    ``eval_batch`` is a fixed held-out batch.
    """

    name: str
    config: AttentionConfig
    sample: Callable[[torch.Generator, int], tuple]
    loss: Callable[[Params, tuple], torch.Tensor]
    eval_batch: tuple


def teacher_student(config: AttentionConfig, seq_len: int = 6, teacher_seed: int = 1000,
                    n_eval: int = 256) -> Task:
    """Regression onto a random layer of the same architecture: mean |f(theta; X) - f(theta*; X)|^2
    over inputs X with N(0, 1) entries (the teacher theta* = init_params(config, teacher_seed))."""
    teacher = init_params(config, teacher_seed)

    def sample(gen: torch.Generator, batch_size: int) -> tuple:
        X = torch.randn(batch_size, seq_len, config.d_model, generator=gen, dtype=torch.float64)
        return X, forward(config, teacher, X)

    def loss(params: Params, batch: tuple) -> torch.Tensor:
        X, Y = batch
        return ((forward(config, params, X) - Y) ** 2).sum(-1).mean()

    X = random_inputs(config, n_eval, seq_len, seed=teacher_seed)
    return Task("teacher-student", config, sample, loss, (X, forward(config, teacher, X)))


def associative_recall(config: AttentionConfig, n_keys: int = 8, n_pairs: int = 4,
                       embed_seed: int = 2000, n_eval: int = 512) -> Task:
    """Associative recall: a sequence of n_pairs tokens e_key(k_i) + e_val(v_i) (distinct keys,
    random values) followed by the query e_key(q), q one of the k_i; predict v_i for k_i = q.

    Embeddings are fixed (rows of a random orthogonal matrix times sqrt(d): keys and values in
    orthogonal subspaces, so 2 n_keys <= d_model); the logits are f(theta; X)[-1] e_val^T / sqrt(d),
    the loss is cross-entropy. Only the attention layer is trained.
    """
    d = config.d_model
    if 2 * n_keys > d:
        raise ValueError(f"n_keys={n_keys} must be at most d_model / 2 = {d // 2}")
    gen0 = torch.Generator().manual_seed(embed_seed)
    Q, _ = torch.linalg.qr(torch.randn(d, d, generator=gen0, dtype=torch.float64))
    e_key, e_val = math.sqrt(d) * Q[:n_keys], math.sqrt(d) * Q[n_keys:2 * n_keys]

    def sample(gen: torch.Generator, batch_size: int) -> tuple:
        keys = torch.rand(batch_size, n_keys, generator=gen).argsort(-1)[:, :n_pairs]
        values = torch.randint(n_keys, (batch_size, n_pairs), generator=gen)
        which = torch.randint(n_pairs, (batch_size,), generator=gen)
        rows = torch.arange(batch_size)
        X = torch.cat([e_key[keys] + e_val[values], e_key[keys[rows, which]][:, None]], dim=1)
        return X, values[rows, which]

    def loss(params: Params, batch: tuple) -> torch.Tensor:
        X, target = batch
        logits = forward(config, params, X)[:, -1] @ e_val.T / math.sqrt(d)
        return torch.nn.functional.cross_entropy(logits, target)

    return Task("associative recall", config, sample, loss,
                sample(torch.Generator().manual_seed(embed_seed + 1), n_eval))


# --- training ---------------------------------------------------------------------------------

OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")

# --- the chapter's knobs ------------------------------------------------------------------------

PROFILES = {
    "default": dict(steps=120, n_seeds=5, recall_keys=8, recall_pairs=4,
                    teacher=dict(d_model=8, n_heads=4, n_kv_heads=2, head_dim=4),
                    recall=dict(d_model=16, n_heads=4), rebalance_optimizers=["adam"]),
    "full": dict(steps=600, n_seeds=10, recall_keys=12, recall_pairs=6,
                 teacher=dict(d_model=12, n_heads=6, n_kv_heads=3, head_dim=4),
                 recall=dict(d_model=24, n_heads=6), rebalance_optimizers=list(OPTIMIZERS)),
}
"""Chapter 6's profile-dependent knobs (``report.parameters.with_profile`` fills the None ones)."""

TASKS = ("teacher-student", "associative recall")


def _trainable(x: dict) -> str | None:
    why = layer().reason(x)
    if why is not None:
        return why
    try:
        check_supported(AttentionConfig(**x))
    except ValueError as e:
        return str(e)
    return None


LAYER = Rule("a dict of AttentionConfig fields (names to values)",
             lambda x: isinstance(x, dict) and all(isinstance(k, str) for k in x), _trainable)
"""A layer knob: it builds (its own rule in the message) and ``idlib.conservation`` treats it."""

RATES = Rule("{task: {'sgd': rate, 'adam': rate}} for both tasks, every rate positive",
             lambda x: isinstance(x, dict) and set(x) == set(TASKS)
             and all(isinstance(v, dict) and set(v) == {"sgd", "adam"}
                     and all(POSITIVE_REAL.holds(r) for r in v.values()) for v in x.values()))
"""The learning-rate knob: one SGD and one Adam rate per task (momentum and AdamW derive theirs)."""


def keys_rule(recall: object) -> Rule:
    """The recall task's key count: keys and values take 2 n_keys <= d_model dimensions."""
    d = recall.get("d_model") if isinstance(recall, dict) else None
    return Rule(f"an integer from 1 to d_model / 2 = {d!r} / 2 of the recall layer",
                lambda x: POSITIVE_INT.holds(x) and 2 * x <= d)


def pairs_rule(n_keys: object) -> Rule:
    """The recall task's pairs per sequence: distinct keys, so at most n_keys."""
    return Rule(f"an integer from 1 to recall_keys = {n_keys!r}",
                lambda x: POSITIVE_INT.holds(x) and x <= n_keys)


def gradient(task: Task, params: Params, batch: tuple) -> Params:
    """grad_theta L(theta; batch): the task's loss on ``batch`` differentiated at a copy of
    ``params`` (the tensors passed in are not touched)."""
    p = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    task.loss(p, batch).backward()
    return {k: v.grad for k, v in p.items()}


def make_optimizer(name: str, tensors: list[torch.Tensor], lr: float,
                   weight_decay: float = 0.1) -> torch.optim.Optimizer:
    """'sgd' (plain), 'momentum' (SGD, momentum 0.9), 'adam', 'adamw' (decoupled weight decay)."""
    if name == "sgd":
        return torch.optim.SGD(tensors, lr=lr)
    if name == "momentum":
        return torch.optim.SGD(tensors, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(tensors, lr=lr)
    if name == "adamw":
        return torch.optim.AdamW(tensors, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"optimizer={name!r} must be one of {OPTIMIZERS}")


@dataclass
class History:
    """What one run records. ``eval_steps``/``eval_loss``: held-out loss at those steps;
    ``overlap``: per step, the share of the applied update in the tangent at the point it left
    (keys 'total', 'qk', 'vo'; empty unless tracked); ``drift``: per step, drift of the conserved
    quantities from the initial point (keys 'total', 'qk', 'vo')."""

    eval_steps: list[int] = field(default_factory=list)
    eval_loss: list[float] = field(default_factory=list)
    overlap: dict[str, list[float]] = field(default_factory=lambda: {"total": [], "qk": [], "vo": []})
    drift: dict[str, list[float]] = field(default_factory=lambda: {"total": [], "qk": [], "vo": []})
    grad_overlap: list[float] = field(default_factory=list)

    @property
    def final_loss(self) -> float:
        return self.eval_loss[-1]


def train(task: Task, optimizer: str, lr: float, steps: int, seed: int = 0,
          rebalance: str | None = None, batch_size: int = 32, eval_every: int = 10,
          track_overlap: bool = False) -> History:
    """Train a fresh student (init_params(config, seed)) with minibatches drawn from a generator
    seeded by ``seed``; ``rebalance`` in (None, 'project', 'balance') wraps the optimizer in
    :class:`Rebalanced`. Records the drift every step, the overlap every step if asked."""
    torch.manual_seed(seed)
    cfg = task.config
    params = {k: v.clone().requires_grad_(True) for k, v in init_params(cfg, seed).items()}
    opt = Rebalanced(make_optimizer(optimizer, list(params.values()), lr), cfg, params, rebalance)
    gen = torch.Generator().manual_seed(seed + 7919)
    hist = History()
    c0 = conserved(cfg, {k: v.detach() for k, v in params.items()})

    def evaluate(step: int) -> None:
        with torch.no_grad():
            hist.eval_steps.append(step)
            hist.eval_loss.append(float(task.loss(params, task.eval_batch)))

    evaluate(0)
    for step in range(1, steps + 1):
        before = {k: v.detach().clone() for k, v in params.items()}
        opt.zero_grad()
        task.loss(params, task.sample(gen, batch_size)).backward()
        if track_overlap:
            grad = torch.cat([p.grad.reshape(-1) for p in params.values()])
            hist.grad_overlap.append(overlap(cfg, before, grad)["total"])
        opt.step()
        now = {k: v.detach() for k, v in params.items()}
        if track_overlap:
            for key, val in overlap(cfg, before, flatten(now) - flatten(before)).items():
                hist.overlap[key].append(val)
        for key, val in drift(conserved(cfg, now), c0).items():
            hist.drift[key].append(val)
        if step % eval_every == 0 or step == steps:
            evaluate(step)
    return hist


def progress(total: int, enabled: bool) -> tqdm:
    """A plain tqdm bar (not tqdm.auto's notebook widget) on the terminal (sys.__stderr__, never
    a notebook output), or a no-op."""
    return tqdm(total=total, file=sys.__stderr__, disable=not enabled, leave=False)


def train_runs(task: Task, runs: list[dict], show_progress: bool = False) -> list[History]:
    """``train(task, **run)`` for each run (dicts of train's keyword arguments), in order."""
    out = []
    with progress(len(runs), show_progress) as bar:
        for run in runs:
            out.append(train(task, **run))
            bar.update(1)
    return out


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1), as floats."""
    t = torch.tensor(values, dtype=torch.float64)
    return float(t.mean()), float(t.std()) if len(values) > 1 else 0.0
