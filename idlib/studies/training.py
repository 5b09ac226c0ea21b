"""Training along the orbit: how much of an update is invisible, what gradient flow conserves,
and two ways to rebalance.

Notation as in :mod:`idlib.attention` (row vectors; head h reads group g = h // m). For group g
write the query/key and value/output factors with their biases stacked as a last row:

    Qt_h = [W_Q^h; b_Q^h]  (d+1 or d, k),   Kt_g = [W_K^g; b_K^g],
    Vt_g = [W_V^g; b_V^g]  (d+1 or d, v),   W_O^h  (v, d).

The continuous symmetry contains, per group, A_g in GL(k) (the commutant of the RoPE rotation
when there is RoPE) and B_g in GL(v):  Qt_h -> Qt_h A_g, Kt_g -> Kt_g A_g^{-T}, Vt_g -> Vt_g B_g,
W_O^h -> B_g^{-1} W_O^h. Its Lie algebra acts on the parameters as

    xi_E:  dQt_h = Qt_h E,  dKt_g = -Kt_g E^T;      xi_C:  dVt_g = Vt_g C,  dW_O^h = -C W_O^h.

Any loss that depends on the parameters only through the layer's function satisfies
<grad L, xi> = 0 for every tangent vector xi; pairing with xi_E and xi_C gives the identities

    sum_h Qt_h^T dL/dQt_h = (dL/dKt_g)^T Kt_g,        Vt_g^T dL/dVt_g = sum_h dL/dW_O^h W_O^{hT},

from which the moment maps

    C_QK^g = sum_{h in g} Qt_h^T Qt_h - Kt_g^T Kt_g,      C_VO^g = Vt_g^T Vt_g - sum_{h in g} W_O^h W_O^{hT}

are constant under gradient flow (with RoPE: their orthogonal projection onto the commutant).
"""
from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..attention import (DTYPE, Params, flatten, forward, init_params, n_params, param_slices,
                        random_inputs, unflatten)
from ..config import AttentionConfig
from ..counting import count
from ..symmetry import Chart, act, chart, orbit_generators

QK_NAMES = ("W_Q", "W_K", "b_Q", "b_K")
VO_NAMES = ("W_V", "W_O", "b_V", "b_O")
COMPONENTS = {"qk": QK_NAMES, "vo": VO_NAMES}


# --- the orbit's tangent at a point ---------------------------------------------------------

def check_supported(config: AttentionConfig) -> None:
    """This module treats one plain layer; raise ValueError naming the field otherwise."""
    for name, plain in (("qk_norm", "none"), ("kv_latent", None), ("input_centered", False),
                        ("n_layers", 1)):
        value = getattr(config, name, plain)
        if value != plain:
            raise ValueError(f"{name}={value!r} must be {plain!r}: idlib.training treats one plain "
                             "attention layer (its moment maps and balancing are derived for it)")


@functools.lru_cache(maxsize=64)
def _cached_chart(config: AttentionConfig) -> Chart:
    return chart(config, init_params(config, 0))


def _chart(config: AttentionConfig, params: Params, frequencies: torch.Tensor | None) -> Chart:
    """symmetry.chart, cached per config when it cannot depend on the parameters (no custom
    frequencies, head_dim and value_dim <= d_model: no null moves)."""
    check_supported(config)
    if frequencies is None and max(config.head_dim, config.value_dim) <= config.d_model:
        return _cached_chart(config)
    return chart(config, params, frequencies)


def _closed_form_chart(ch: Chart) -> bool:
    """True when the chart has only the GL (or commutant) blocks, i.e. no null or bias moves."""
    return all(ch.sizes[name] == 0 for name in ch.sizes if name not in ("qk", "vo"))


def lie_action(config: AttentionConfig, params: Params, coords: torch.Tensor, ch: Chart) -> Params:
    """The tangent vector xi(coords) at ``params`` for the GL blocks (the derivative of ``act``).

    ``coords`` (..., n) is laid out as in :func:`idlib.symmetry.act`: first G blocks of the
    commutant basis (E_g = sum_c coords[g, c] E_c), then G blocks (v, v) (C_g). Leading batch
    dimensions of ``coords`` become leading dimensions of every output tensor.
    """
    G, H, m, v = config.n_kv_heads, config.n_heads, config.group_size, config.value_dim
    c, batch = ch.qk_basis.shape[0], coords.shape[:-1]
    E = torch.einsum("...gc,cij->...gij", coords[..., :G * c].reshape(*batch, G, c), ch.qk_basis)
    C = coords[..., G * c:G * c + G * v * v].reshape(*batch, G, v, v)
    group = torch.arange(H) // m
    E_h, C_h, E_T = E[..., group, :, :], C[..., group, :, :], E.transpose(-1, -2)
    row = lambda b, M: (b[:, None, :] @ M)[..., 0, :]          # noqa: E731 (bias rows times M)
    out = {}
    for name, p in params.items():
        if name == "W_Q":
            out[name] = p @ E_h
        elif name == "W_K":
            out[name] = -p @ E_T
        elif name == "b_Q":
            out[name] = row(p, E_h)
        elif name == "b_K":
            out[name] = -row(p, E_T)
        elif name == "W_V":
            out[name] = p @ C
        elif name == "W_O":
            out[name] = -C_h @ p
        elif name == "b_V":
            out[name] = row(p, C)
        else:                                    # b_O: the GL action keeps sum_h b_V W_O^h
            out[name] = torch.zeros(*batch, *p.shape, dtype=p.dtype)
    return out


def generators(config: AttentionConfig, params: Params,
               frequencies: torch.Tensor | None = None) -> torch.Tensor:
    """(n_params, n_coordinates): columns xi(e_i), the same matrix as symmetry.orbit_generators.

    Built in closed form (the action is linear in the Lie algebra) when the layer has only the
    GL blocks; otherwise (null moves for k > d or v > d, bias moves) delegated to
    :func:`idlib.symmetry.orbit_generators`.
    """
    ch = _chart(config, params, frequencies)
    if not _closed_form_chart(ch):
        return orbit_generators(config, params, frequencies)
    n = sum(ch.sizes.values())
    cols = lie_action(config, params, torch.eye(n, dtype=DTYPE), ch)
    return torch.cat([t.reshape(n, -1) for t in cols.values()], dim=1).T


def tangent(config: AttentionConfig, params: Params, frequencies: torch.Tensor | None = None,
            rtol: float = 1e-9) -> torch.Tensor:
    """Orthonormal basis (n_params, u) of the orbit tangent (same span as symmetry.tangent_basis)."""
    U, s, _ = torch.linalg.svd(generators(config, params, frequencies), full_matrices=False)
    return U[:, : int((s > rtol * s.max()).sum())]


def _sylvester(P: torch.Tensor, Q: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    """Solve P E + E Q = R for symmetric positive semi-definite P, Q with P + Q > 0 (batched):
    with P = U diag(a) U^T, Q = V diag(b) V^T, E = U [(U^T R V)_ij / (a_i + b_j)] V^T."""
    a, U = torch.linalg.eigh(P)
    b, V = torch.linalg.eigh(Q)
    return U @ ((U.transpose(-1, -2) @ R @ V) / (a[..., :, None] + b[..., None, :])) @ V.transpose(-1, -2)


def tangent_coords(config: AttentionConfig, params: Params, update: torch.Tensor,
                   frequencies: torch.Tensor | None = None) -> torch.Tensor:
    """Coordinates c (layout of symmetry.act) of the orthogonal projection of ``update`` onto the
    orbit tangent: c = argmin |T c - update|, T = generators(config, params).

    Without RoPE and without null or bias moves the normal equations split per group into
    Sylvester equations with the Gram matrices of :func:`grams`:
        QK:  (sum_h Qt_h^T Qt_h) E + E (Kt^T Kt) = sum_h Qt_h^T dQt_h - dKt^T Kt,
        VO:  (Vt^T Vt) C + C (sum_h W_O^h W_O^{hT}) = Vt^T dVt - sum_h dW_O^h W_O^{hT},
    (set the derivative of sum_h |dQt_h - Qt_h E|^2 + |dKt + Kt E^T|^2 in E to zero), solved by
    two eigendecompositions each. Otherwise a least-squares solve against the generators.
    """
    ch = _chart(config, params, frequencies)
    if config.rotary_dim or frequencies is not None or not _closed_form_chart(ch):
        T = generators(config, params, frequencies)
        return torch.linalg.lstsq(T, update[:, None], driver="gelsd").solution[:, 0]
    G, m = config.n_kv_heads, config.group_size
    D = unflatten(config, update)
    Qt, Kt = _stack_bias(params["W_Q"], params.get("b_Q")), _stack_bias(params["W_K"], None)
    dQ, dK = _stack_bias(D["W_Q"], D.get("b_Q")), D["W_K"]
    Rq = (Qt.transpose(-1, -2) @ dQ).reshape(G, m, *Qt.shape[-1:] * 2).sum(1) - dK.transpose(-1, -2) @ Kt
    V, W_O, dV, dO = params["W_V"], params["W_O"], D["W_V"], D["W_O"]
    Ro = (dO @ W_O.transpose(-1, -2)).reshape(G, m, *W_O.shape[1:2] * 2).sum(1)
    g = grams(config, params)
    E = _sylvester(*g["qk"], Rq)
    C = _sylvester(*g["vo"], V.transpose(-1, -2) @ dV - Ro)
    return torch.cat([torch.einsum("gij,cij->gc", E, ch.qk_basis).reshape(-1), C.reshape(-1)])


def tangent_part(config: AttentionConfig, params: Params, update: torch.Tensor,
                 frequencies: torch.Tensor | None = None) -> torch.Tensor:
    """Pi_T update: the orthogonal projection of a flat update onto the orbit tangent."""
    c = tangent_coords(config, params, update, frequencies)
    ch = _chart(config, params, frequencies)
    if _closed_form_chart(ch):
        return flatten(lie_action(config, params, c, ch))
    return generators(config, params, frequencies) @ c


def component_rows(config: AttentionConfig) -> dict[str, torch.Tensor]:
    """Boolean masks of the flat vector: 'qk' = W_Q, W_K, b_Q, b_K; 'vo' = W_V, W_O, b_V, b_O."""
    slices = param_slices(config)
    masks = {}
    for comp, names in COMPONENTS.items():
        mask = torch.zeros(n_params(config), dtype=torch.bool)
        for name in names:
            if name in slices:
                mask[slices[name]] = True
        masks[comp] = mask
    return masks


def overlap(config: AttentionConfig, params: Params, update: torch.Tensor,
            basis: torch.Tensor | None = None) -> dict[str, float]:
    """Share of the update's norm inside the orbit tangent T at ``params``: |Pi_T u| / |u|.

    Pi_T from an orthonormal ``basis`` of T if given (e.g. :func:`tangent`), else
    :func:`tangent_part`.

    T is the orthogonal sum T_QK + T_VO of subspaces supported on disjoint coordinates, so the
    share of component c is |(Pi_T u)_c| / |u_c| (rows of c only). Keys 'total', 'qk', 'vo';
    a component whose update is exactly zero gets share 0.
    """
    proj = tangent_part(config, params, update) if basis is None else basis @ (basis.T @ update)
    out = {"total": _ratio(proj, update)}
    for comp, mask in component_rows(config).items():
        out[comp] = _ratio(proj[mask], update[mask])
    return out


def _ratio(a: torch.Tensor, b: torch.Tensor) -> float:
    nb = float(b.norm())
    return float(a.norm()) / nb if nb > 0 else 0.0


def random_share(config: AttentionConfig) -> dict[str, float]:
    """sqrt(E |Pi_T u|^2 / |u|^2) = sqrt(dim T_c / n_c) for an isotropic random update u, from the
    closed-form counts (component 'qk' holds qk, b_Q, b_K; 'vo' holds vo, b_V, b_O)."""
    cnt = count(config)
    out = {"total": math.sqrt(cnt.unidentified / cnt.total)}
    for comp, names in {"qk": ("qk", "b_Q", "b_K"), "vo": ("vo", "b_V", "b_O")}.items():
        parts = [c for c in cnt.components if c.name in names]
        out[comp] = math.sqrt(sum(c.unidentified for c in parts) / sum(c.total for c in parts))
    return out


# --- the conserved quantities ---------------------------------------------------------------

def _stack_bias(W: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """[W; b] along the input axis: (n, d, k) and (n, k) -> (n, d+1, k)."""
    return W if b is None else torch.cat([W, b[:, None, :]], dim=1)


def grams(config: AttentionConfig, params: Params) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per group, the two Gram matrices whose difference is conserved.

    'qk': (sum_{h in g} Qt_h^T Qt_h, Kt_g^T Kt_g), each (G, k, k);
    'vo': (Vt_g^T Vt_g, sum_{h in g} W_O^h W_O^{hT}), each (G, v, v).
    The first matrix of a pair belongs to the factor that a group element multiplies by A (or B),
    the second to the factor multiplied by A^{-T} (or B^{-1}).
    """
    G, m = config.n_kv_heads, config.group_size
    Qt = _stack_bias(params["W_Q"], params.get("b_Q"))
    Kt = _stack_bias(params["W_K"], params.get("b_K"))
    Vt = _stack_bias(params["W_V"], params.get("b_V"))
    gq = (Qt.transpose(-1, -2) @ Qt).reshape(G, m, *Qt.shape[-1:] * 2).sum(1)
    W_O = params["W_O"]
    go = (W_O @ W_O.transpose(-1, -2)).reshape(G, m, *W_O.shape[1:2] * 2).sum(1)
    return {"qk": (gq, Kt.transpose(-1, -2) @ Kt), "vo": (Vt.transpose(-1, -2) @ Vt, go)}


def commutant_projection(M: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """Orthogonal (Frobenius) projection of M (..., k, k) onto span(basis), basis orthonormal (c, k, k)."""
    return torch.einsum("...ij,cij,ckl->...kl", M, basis, basis)


def conserved(config: AttentionConfig, params: Params,
              frequencies: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The moment maps {'qk': (G, k, k), 'vo': (G, v, v)}, the QK one projected onto the
    commutant of the RoPE rotation when the layer has RoPE (the identity projection without)."""
    check_supported(config)
    g = grams(config, params)
    qk = g["qk"][0] - g["qk"][1]
    if config.rotary_dim or frequencies is not None:
        qk = commutant_projection(qk, _chart(config, params, frequencies).qk_basis)
    return {"qk": qk, "vo": g["vo"][0] - g["vo"][1]}


def drift(now: dict[str, torch.Tensor], start: dict[str, torch.Tensor]) -> dict[str, float]:
    """Frobenius norm of the change of the conserved quantities, per component and in total."""
    out = {comp: float((now[comp] - start[comp]).norm()) for comp in now}
    out["total"] = math.sqrt(sum(x * x for x in out.values()))
    return out


# --- rebalancing (b): the balanced point of the orbit ----------------------------------------

def spd_power(M: torch.Tensor, p: float) -> torch.Tensor:
    """M^p for symmetric positive-definite M (..., n, n), by the eigendecomposition."""
    w, U = torch.linalg.eigh((M + M.transpose(-1, -2)) / 2)
    if bool((w <= 0).any()):
        raise ValueError("matrix must be positive definite (a factor of the layer has lost rank)")
    return (U * w[..., None, :] ** p) @ U.transpose(-1, -2)


def balancing_factor(P: torch.Tensor, Q: torch.Tensor) -> torch.Tensor:
    """The SPD S with S P S = S^{-1} Q S^{-1}, for SPD P, Q (..., n, n).

    With X = S^2 the condition is X P X = Q; putting Y = P^{1/2} X P^{1/2} gives Y^2 =
    P^{1/2} Q P^{1/2}, whose only SPD root is Y = (P^{1/2} Q P^{1/2})^{1/2}. Hence
    X = P^{-1/2} (P^{1/2} Q P^{1/2})^{1/2} P^{-1/2} (the geometric mean P^{-1} # Q) and S = X^{1/2}.
    """
    Ph, Pmh = spd_power(P, 0.5), spd_power(P, -0.5)
    X = Pmh @ spd_power(Ph @ Q @ Ph, 0.5) @ Pmh
    return spd_power(X, 0.5)


def balance(config: AttentionConfig, params: Params,
            frequencies: torch.Tensor | None = None) -> Params:
    """Move ``params`` along the orbit to the balanced point: conserved(...) = 0 afterwards.

    Per group g, S_g = balancing_factor of the QK Gram pair (projected onto the RoPE commutant
    when there is RoPE, so that S_g commutes with every rotation) acts as A_g = S_g; T_g =
    balancing_factor of the VO pair acts as B_g = T_g. Symmetric positive-definite factors are the
    group elements nearest the identity that balance: no rotation of a head's coordinates.
    Raises ValueError when a Gram matrix is singular (k > d or v > d, or a collapsed head).
    """
    check_supported(config)
    H, m = config.n_heads, config.group_size
    g = grams(config, params)
    Pq, Pk = g["qk"]
    if config.rotary_dim or frequencies is not None:
        basis = _chart(config, params, frequencies).qk_basis
        Pq, Pk = commutant_projection(Pq, basis), commutant_projection(Pk, basis)
    S = balancing_factor(Pq, Pk)
    T = balancing_factor(*g["vo"])
    S_inv, T_inv = torch.linalg.inv(S), torch.linalg.inv(T)
    group = torch.arange(H) // m
    out = dict(params)
    out["W_Q"] = params["W_Q"] @ S[group]
    out["W_K"] = params["W_K"] @ S_inv
    out["W_V"] = params["W_V"] @ T
    out["W_O"] = T_inv[group] @ params["W_O"]
    if "b_Q" in params:
        out["b_Q"] = (params["b_Q"][:, None, :] @ S[group])[:, 0]
    if "b_K" in params:
        out["b_K"] = (params["b_K"][:, None, :] @ S_inv)[:, 0]
    if "b_V" in params:
        out["b_V"] = (params["b_V"][:, None, :] @ T)[:, 0]
    return out


# --- rebalancing (a): remove the tangent part of a step --------------------------------------

def project_step(config: AttentionConfig, old: Params, new: Params, mode: str = "orbit",
                 frequencies: torch.Tensor | None = None) -> Params:
    """Remove the orbit-tangent part of the step old -> new.

    Let D = theta_new - theta_old, T the generators at theta_old and c = argmin |T c - D| (so
    T c = Pi_T D).
      mode='linear': theta_old + (I - Pi_T) D. The step has no tangent part at all, but the
      function differs from f(theta_new) at second order (the removed vector is tangent at
      theta_old, not at theta_new).
      mode='orbit' (default): exp(-c) . theta_new, the group element with coordinates -c applied
      to theta_new. The function is exactly f(theta_new) (a symmetry acted), and the result is
      theta_old + (I - Pi_T) D + O(|D|^2): the tangent part is removed to first order.
    """
    d = flatten(new) - flatten(old)
    if mode == "linear":
        P = tangent(config, old, frequencies)
        return unflatten(config, flatten(old) + d - P @ (P.T @ d))
    if mode != "orbit":
        raise ValueError(f"mode={mode!r} must be 'orbit' or 'linear'")
    c = tangent_coords(config, old, d, frequencies)
    return act(config, new, -c, _chart(config, new, frequencies))


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
        X = torch.randn(batch_size, seq_len, config.d_model, generator=gen, dtype=DTYPE)
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
    Q, _ = torch.linalg.qr(torch.randn(d, d, generator=gen0, dtype=DTYPE))
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


def progress(total: int, enabled: bool):
    """A tqdm bar on the terminal (sys.__stderr__, never a notebook output), or a no-op."""
    from tqdm import tqdm          # the plain bar, not tqdm.auto's notebook widget
    return tqdm(total=total, file=sys.__stderr__, disable=not enabled, leave=False)


def sweep(task: Task, runs: list[dict], show_progress: bool = False) -> list[History]:
    """``train(task, **run)`` for each run (dicts of train's keyword arguments), in order."""
    out = []
    with progress(len(runs), show_progress) as bar:
        for run in runs:
            out.append(train(task, **run))
            bar.update(1)
    return out


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1), as floats."""
    t = torch.tensor(values, dtype=DTYPE)
    return float(t.mean()), float(t.std()) if len(values) > 1 else 0.0
