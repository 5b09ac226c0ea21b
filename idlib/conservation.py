"""Conservation along the orbit: how much of an update is invisible (the projection onto the
orbit tangent T_theta O), what gradient flow conserves (the moment maps C), and two ways to
rebalance (remove a step's tangent part; move to the balanced point C = 0).

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

One plain layer only (``check_supported``); the group action and the tangent basis are
:mod:`idlib.symmetry`'s (``gl_action``, ``gl_tangent``, ``orbit_generators``, ``tangent_basis``).
"""
from __future__ import annotations

import math

from .lazy import torch

from .attention import Params, flatten, n_params, param_slices, unflatten
from . import variants
from .arguments import FREQUENCIES, LAYER, PARAMS, THETA, accepts, one_of
from .config import AttentionConfig
from .counting import count
from .symmetry import (act, chart, gl_action, gl_blocks, gl_only, gl_tangent, orbit_generators,
                       tangent_basis)

COMPONENTS = {"qk": ("W_Q", "W_K", "b_Q", "b_K"), "vo": ("W_V", "W_O", "b_V", "b_O")}


def check_supported(config: AttentionConfig) -> None:
    """This module treats one plain layer (and the variants whose rows declare "conservation":
    RoPE, biases, the causal mask, soft-capping); raise ValueError naming the others."""
    missing = variants.unsupported(config, "conservation")
    if missing:
        raise ValueError(f"variant(s) {variants.named(missing)}: idlib.conservation treats one "
                         "plain attention layer (its moment maps and balancing are derived for it)")


# --- the projection onto the orbit tangent ---------------------------------------------------

def _sylvester(P: torch.Tensor, Q: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    """Solve P E + E Q = R for symmetric positive semi-definite P, Q with P + Q > 0 (batched):
    with P = U diag(a) U^T, Q = V diag(b) V^T, E = U [(U^T R V)_ij / (a_i + b_j)] V^T."""
    a, U = torch.linalg.eigh(P)
    b, V = torch.linalg.eigh(Q)
    return U @ ((U.transpose(-1, -2) @ R @ V) / (a[..., :, None] + b[..., None, :])) @ V.transpose(-1, -2)


@accepts(config=LAYER, params=PARAMS, update=THETA, frequencies=FREQUENCIES)
def tangent_coords(config: AttentionConfig, params: Params, update: torch.Tensor,
                   frequencies: torch.Tensor | None = None) -> torch.Tensor:
    """Coordinates c (layout of symmetry.act) of the orthogonal projection of ``update`` onto the
    orbit tangent: c = argmin |T c - update|, T = symmetry.orbit_generators(config, params).

    Without RoPE and without null or bias moves the normal equations split per group into
    Sylvester equations with the Gram matrices of :func:`grams`:
        QK:  (sum_h Qt_h^T Qt_h) E + E (Kt^T Kt) = sum_h Qt_h^T dQt_h - dKt^T Kt,
        VO:  (Vt^T Vt) C + C (sum_h W_O^h W_O^{hT}) = Vt^T dVt - sum_h dW_O^h W_O^{hT},
    (set the derivative of sum_h |dQt_h - Qt_h E|^2 + |dKt + Kt E^T|^2 in E to zero), solved by
    two eigendecompositions each. Otherwise a least-squares solve against the generators.
    """
    check_supported(config)
    ch = chart(config, params, frequencies)
    if config.rotary_dim or frequencies is not None or not gl_only(ch):
        T = orbit_generators(config, params, frequencies)
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


@accepts(config=LAYER, params=PARAMS, update=THETA, frequencies=FREQUENCIES)
def tangent_part(config: AttentionConfig, params: Params, update: torch.Tensor,
                 frequencies: torch.Tensor | None = None) -> torch.Tensor:
    """Pi_T update: the orthogonal projection of a flat update onto the orbit tangent."""
    c = tangent_coords(config, params, update, frequencies)
    ch = chart(config, params, frequencies)
    if gl_only(ch):
        return flatten(gl_tangent(config, params, *gl_blocks(config, c, ch)))
    return orbit_generators(config, params, frequencies) @ c


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


@accepts(config=LAYER, params=PARAMS, update=THETA)
def overlap(config: AttentionConfig, params: Params, update: torch.Tensor,
            basis: torch.Tensor | None = None) -> dict[str, float]:
    """Share of the update's norm inside the orbit tangent T at ``params``: |Pi_T u| / |u|.

    Pi_T from an orthonormal ``basis`` of T if given (e.g. :func:`idlib.symmetry.tangent_basis`), else
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


@accepts(config=LAYER, params=PARAMS, frequencies=FREQUENCIES)
def conserved(config: AttentionConfig, params: Params,
              frequencies: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The moment maps {'qk': (G, k, k), 'vo': (G, v, v)}, the QK one projected onto the
    commutant of the RoPE rotation when the layer has RoPE (the identity projection without)."""
    check_supported(config)
    g = grams(config, params)
    qk = g["qk"][0] - g["qk"][1]
    if config.rotary_dim or frequencies is not None:
        qk = commutant_projection(qk, chart(config, params, frequencies).qk_basis)
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


@accepts(config=LAYER, params=PARAMS, frequencies=FREQUENCIES)
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
    g = grams(config, params)
    Pq, Pk = g["qk"]
    if config.rotary_dim or frequencies is not None:
        basis = chart(config, params, frequencies).qk_basis
        Pq, Pk = commutant_projection(Pq, basis), commutant_projection(Pk, basis)
    S = balancing_factor(Pq, Pk)
    T = balancing_factor(*g["vo"])
    return gl_action(config, params, S, T)


# --- rebalancing (a): remove the tangent part of a step --------------------------------------

@accepts(config=LAYER, old=PARAMS, new=PARAMS, mode=one_of("orbit", "linear"),
         frequencies=FREQUENCIES)
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
        check_supported(config)
        P = tangent_basis(config, old, frequencies)
        return unflatten(config, flatten(old) + d - P @ (P.T @ d))
    if mode != "orbit":
        raise ValueError(f"mode={mode!r} must be 'orbit' or 'linear'")
    c = tangent_coords(config, old, d, frequencies)
    return act(config, new, -c, chart(config, new, frequencies))
