"""The layer's continuous symmetries: group elements acting on parameters, and the orbit tangent.

Coordinates of the group at a parameter point (``chart``), for each key/value group g:

* QK: A_g = exp(sum_i c_i E_i), E_i a basis of the commutant of the offset-1 rotation R(1)
  (all of gl(k) without RoPE):  W_Q^h -> W_Q^h A_g, b_Q^h -> b_Q^h A_g,
  W_K^g -> W_K^g A_g^{-T}, b_K^g -> b_K^g A_g^{-T}.
* VO: B_g = exp(C), C in gl(v):  W_V^g -> W_V^g B_g, b_V^g -> b_V^g B_g, W_O^h -> B_g^{-1} W_O^h.
* Null moves when k > d (no RoPE): [W_Q^h; b_Q^h] += Y_h N_g^T with W_K^g N_g = 0; when v > d:
  W_O^h += M_g Y_h with W_V^g M_g = 0.
* Bias moves: b_K^g += the part fixed by every rotation; b_V^g += e_g with the constant
  c = sum_h b_V^g W_O^h kept (by b_O when there is an output bias, else by e_g's constraint).

The tangent space of the orbit is the derivative of ``act`` at coordinates 0.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .attention import DTYPE, Params, apply_rope, flatten, rope_frequencies
from .config import AttentionConfig


def null_space(M: torch.Tensor, rtol: float = 1e-10) -> torch.Tensor:
    """Orthonormal basis (columns) of {x : M x = 0}."""
    if M.numel() == 0:
        return torch.eye(M.shape[1], dtype=M.dtype)
    _, s, Vh = torch.linalg.svd(M, full_matrices=True)
    rank = int((s > rtol * max(s.max().item(), 1.0)).sum())
    return Vh[rank:].T.conj()


def rotation_matrix(config: AttentionConfig, offset: float = 1.0,
                    frequencies: torch.Tensor | None = None) -> torch.Tensor:
    """R(t) as a (k, k) matrix acting on row vectors: apply_rope(x at position t) = x R(t)."""
    k = config.head_dim
    freqs = rope_frequencies(config) if frequencies is None else frequencies
    if not config.rotary_dim:
        return torch.eye(k, dtype=DTYPE)
    return apply_rope(torch.eye(k, dtype=DTYPE), freqs, torch.full((k,), offset, dtype=DTYPE))


def commutant_basis(R: torch.Tensor) -> torch.Tensor:
    """Basis (c, k, k) of {E : E R = R E}, the Lie algebra of the QK symmetry under RoPE."""
    k = R.shape[0]
    units = torch.eye(k * k, dtype=R.dtype).reshape(k * k, k, k)
    L = (units @ R - R @ units).reshape(k * k, k * k).T        # column i = vec([E_i, R])
    return null_space(L).T.reshape(-1, k, k)


@dataclass(frozen=True)
class Chart:
    """Where each group coordinate sits, and the bases the action uses at one parameter point."""

    qk_basis: torch.Tensor            # (c, k, k)
    k_fixed: torch.Tensor             # (k, f): row vectors fixed by every rotation
    qk_null: list[torch.Tensor]       # per group (k, k - d), empty unless k > d
    vo_null: list[torch.Tensor]       # per group (v, v - d), empty unless v > d
    sizes: dict[str, int]             # coordinate block sizes, in order


def chart(config: AttentionConfig, params: Params, frequencies: torch.Tensor | None = None) -> Chart:
    d, H, G, k, v = config.d_model, config.n_heads, config.n_kv_heads, config.head_dim, config.value_dim
    R = rotation_matrix(config, 1.0, frequencies)
    qk_basis = commutant_basis(R)
    k_fixed = null_space(R.T - torch.eye(k, dtype=DTYPE))
    qk_null = [null_space(params["W_K"][g]) for g in range(G)] if k > d else []
    vo_null = [null_space(params["W_V"][g]) for g in range(G)] if v > d else []
    a = d + 1 if config.has_bias("q") else d
    sizes = {"qk": G * qk_basis.shape[0], "vo": G * v * v,
             "qk_null": H * a * (k - d) if qk_null else 0,
             "vo_null": H * (v - d) * d if vo_null else 0,
             "b_K": G * k_fixed.shape[1] if config.has_bias("k") else 0,
             "b_V": G * v if config.has_bias("v") else 0}
    return Chart(qk_basis, k_fixed, qk_null, vo_null, sizes)


def n_coordinates(ch: Chart) -> int:
    return sum(ch.sizes.values())


def act(config: AttentionConfig, params: Params, coords: torch.Tensor, ch: Chart) -> Params:
    """The group element with coordinates ``coords`` (in ``ch``) applied to ``params``."""
    d, H, G, m = config.d_model, config.n_heads, config.n_kv_heads, config.group_size
    k, v = config.head_dim, config.value_dim
    blocks, i = {}, 0
    for name, size in ch.sizes.items():
        blocks[name] = coords[i:i + size]
        i += size
    p = dict(params)
    group = [h // m for h in range(H)]

    if ch.qk_null:                                   # [W_Q; b_Q] += Y N^T
        a = d + 1 if "b_Q" in p else d
        Y = blocks["qk_null"].reshape(H, a, k - d)
        moves = torch.stack([Y[h] @ ch.qk_null[group[h]].T for h in range(H)])
        p["W_Q"] = p["W_Q"] + moves[:, :d]
        if "b_Q" in p:
            p["b_Q"] = p["b_Q"] + moves[:, d]
    c_before = _value_constant(config, p) if "b_V" in p else None
    if ch.vo_null:                                   # W_O += M Y
        Y = blocks["vo_null"].reshape(H, v - d, d)
        p["W_O"] = p["W_O"] + torch.stack([ch.vo_null[group[h]] @ Y[h] for h in range(H)])
    if "b_V" in p:                                   # b_V += e, keeping c = sum_h b_V W_O^h
        e = blocks["b_V"].reshape(G, v)
        if "b_O" in p:
            p["b_V"] = p["b_V"] + e
            p["b_O"] = p["b_O"] + c_before - _value_constant(config, p)
        else:
            S = torch.stack([p["W_O"][g * m:(g + 1) * m].sum(0) for g in range(G)])  # (G, v, d)
            M = S.reshape(G * v, d)
            resid = c_before - p["b_V"].reshape(-1) @ M - e.reshape(-1) @ M
            e = e.reshape(-1) + resid @ torch.linalg.pinv(M)
            p["b_V"] = p["b_V"] + e.reshape(G, v)

    A = torch.linalg.matrix_exp(torch.einsum("gc,cij->gij",
                                             blocks["qk"].reshape(G, -1), ch.qk_basis))
    B = torch.linalg.matrix_exp(blocks["vo"].reshape(G, v, v))
    A_inv_T, B_inv = torch.linalg.inv(A).transpose(-1, -2), torch.linalg.inv(B)
    p["W_Q"] = p["W_Q"] @ A[group]
    p["W_K"] = p["W_K"] @ A_inv_T
    p["W_V"] = p["W_V"] @ B
    p["W_O"] = B_inv[group] @ p["W_O"]
    if "b_Q" in p:
        p["b_Q"] = (p["b_Q"][:, None, :] @ A[group])[:, 0]
    if "b_K" in p:
        p["b_K"] = (p["b_K"][:, None, :] @ A_inv_T)[:, 0] + blocks["b_K"].reshape(G, -1) @ ch.k_fixed.T
    if "b_V" in p:
        p["b_V"] = (p["b_V"][:, None, :] @ B)[:, 0]
    return p


def _value_constant(config: AttentionConfig, p: Params) -> torch.Tensor:
    """c = sum_h b_V^{g(h)} W_O^h, the constant the value bias adds to every output."""
    m = config.group_size
    return torch.einsum("hv,hvd->d", p["b_V"].repeat_interleave(m, dim=0), p["W_O"])


def random_group_element(config: AttentionConfig, params: Params, seed: int = 0,
                         scale: float = 0.5, frequencies: torch.Tensor | None = None) -> Params:
    """``params`` moved by a random element of the symmetry group (the output is unchanged)."""
    ch = chart(config, params, frequencies)
    gen = torch.Generator().manual_seed(seed)
    parts = []
    for name, size in ch.sizes.items():
        width = {"qk": config.head_dim, "vo": config.value_dim}.get(name, config.d_model)
        parts.append(scale / width ** 0.5 * torch.randn(size, generator=gen, dtype=DTYPE))
    return act(config, params, torch.cat(parts), ch)


def orbit_generators(config: AttentionConfig, params: Params,
                     frequencies: torch.Tensor | None = None) -> torch.Tensor:
    """d act / d coords at 0: (n_params, n_coordinates), columns spanning the orbit tangent."""
    ch = chart(config, params, frequencies)
    zero = torch.zeros(n_coordinates(ch), dtype=DTYPE)
    return torch.func.jacfwd(lambda c: flatten(act(config, params, c, ch)))(zero)


def tangent_basis(config: AttentionConfig, params: Params,
                  frequencies: torch.Tensor | None = None, rtol: float = 1e-9) -> torch.Tensor:
    """Orthonormal basis (n_params, u) of the orbit's tangent space: the unidentified directions."""
    T = orbit_generators(config, params, frequencies)
    U, s, _ = torch.linalg.svd(T, full_matrices=False)
    return U[:, : int((s > rtol * s.max()).sum())]


def permute_heads(config: AttentionConfig, params: Params, head_perm: list[int]) -> Params:
    """Relabel query heads: new head h is old head head_perm[h] (a discrete symmetry).

    The permutation must carry whole key/value groups onto groups, so the shared K/V move along.
    """
    H, m = config.n_heads, config.group_size
    if sorted(head_perm) != list(range(H)):
        raise ValueError(f"head_perm={head_perm} must be a permutation of range({H})")
    group_perm = {}
    for h, old in enumerate(head_perm):
        if group_perm.setdefault(h // m, old // m) != old // m:
            raise ValueError(f"head_perm={head_perm} must map each key/value group onto one group")
    gp = [group_perm[g] for g in range(config.n_kv_heads)]
    out = {}
    for name, value in params.items():
        if name in ("W_Q", "W_O", "b_Q"):
            out[name] = value[list(head_perm)]
        elif name in ("W_K", "W_V", "b_K", "b_V"):
            out[name] = value[gp]
        else:
            out[name] = value
    return out
