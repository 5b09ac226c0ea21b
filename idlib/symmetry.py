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

Variants (chapter 7): with qk_norm the QK block is the orthogonal part of the commutant
(none with gains), plus one scale per query head and per key group ("qk_scale") and the gain
exchanges g_Q exp(s), g_K exp(-s) ("gain"); with input_centered the all-ones components of
W_Q, W_K, W_V ("ones") and null moves against the centred W_K, W_V; a stack (n_layers > 1) acts
with one A, B per key/value group and set on every layer of the set.  kv_latent: not
implemented (``chart`` and ``act`` raise NotImplementedError).

The GL blocks alone are one linear map per head and group (``linear_action``): the group
element (``gl_action``: A, A^{-T}, B, B^{-1}) and its derivative, the tangent vector
xi_{E,C} (``gl_tangent``: dW_Q^h = W_Q^h E_g, dW_K^g = -W_K^g E_g^T, dW_V^g = W_V^g C_g,
dW_O^h = -C_g W_O^h) are both built from it; so are the chapters' deliberately broken actions.

The tangent space of the orbit is the derivative of ``act`` at coordinates 0 (``orbit_generators``:
in closed form when only the GL blocks are present, by forward-mode autodiff otherwise);
``tangent_basis`` is its orthonormal basis, the one the whole library uses.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from .lazy import torch

from .attention import Params, apply_rope, flatten, param_shapes, rope_frequencies
from . import variants
from .arguments import (FREQUENCIES, HEAD_PERMUTATION, LAYER, PARAMS, SEED, TOLERANCE, accepts,
                        real)
from .config import AttentionConfig

SCALE = real(0.0, 1e6, open_low=True)


def null_space(M: torch.Tensor, rtol: float = 1e-10) -> torch.Tensor:
    """Orthonormal basis (columns) of {x : M x = 0}, rank cut at rtol * max(sigma_1, 1).

    The basis is canonical (:func:`canonical_basis`): the same on every machine, whichever
    basis of a repeated singular value the SVD returns."""
    if M.numel() == 0:
        return torch.eye(M.shape[1], dtype=M.dtype)
    _, s, Vh = torch.linalg.svd(M, full_matrices=True)
    rank = int((s > rtol * max(s.max().item(), 1.0)).sum())
    return canonical_basis(Vh[rank:].T.conj())


def canonical_basis(N: torch.Tensor, tol: float = 1e-6) -> torch.Tensor:
    """The Gram-Schmidt basis of span(N) (N: (n, r) orthonormal columns) from the projections
    P e_i (P = N N^H) of the unit vectors taken in order, skipping those within ``tol`` of the
    span of the earlier ones. It depends on span(N) alone: P e_i has coordinates N[i]^H in the
    basis N, so the Gram-Schmidt runs on those r-vectors and the result is N times it."""
    n, r = N.shape
    if r in (0, n):
        return torch.eye(n, dtype=N.dtype)[:, :r] if r == n else N
    Q = torch.zeros(r, 0, dtype=N.dtype)
    for i in range(n):
        c = N[i].conj()
        for _ in range(2):                                   # twice is enough (Kahan)
            c = c - Q @ (Q.T.conj() @ c)
        norm = torch.linalg.vector_norm(c)
        if norm > tol:
            Q = torch.cat([Q, (c / norm)[:, None]], dim=1)
            if Q.shape[1] == r:
                break
    return N @ Q


def rotation_matrix(config: AttentionConfig, offset: float = 1.0,
                    frequencies: torch.Tensor | None = None) -> torch.Tensor:
    """R(t) as a (k, k) matrix acting on row vectors: apply_rope(x at position t) = x R(t)."""
    k = config.head_dim
    freqs = rope_frequencies(config) if frequencies is None else frequencies
    if not config.rotary_dim:
        return torch.eye(k, dtype=torch.float64)
    return apply_rope(torch.eye(k, dtype=torch.float64), freqs, torch.full((k,), offset, dtype=torch.float64))


def commutant_basis(R: torch.Tensor) -> torch.Tensor:
    """Basis (c, k, k) of {E : E R = R E}, the Lie algebra of the QK symmetry under RoPE."""
    k = R.shape[0]
    units = torch.eye(k * k, dtype=R.dtype).reshape(k * k, k, k)
    L = (units @ R - R @ units).reshape(k * k, k * k).T        # column i = vec([E_i, R])
    return null_space(L).T.reshape(-1, k, k)


@dataclass(frozen=True)
class Chart:
    """Where each group coordinate sits, and the bases the action uses at one parameter point."""

    qk_basis: torch.Tensor            # (c, k, k): commutant (skew part of it with qk_norm="plain")
    k_fixed: torch.Tensor             # (k, f): row vectors fixed by every rotation
    qk_null: list[torch.Tensor]       # per key/value group (k, k - d_in), empty unless k > d_in
    vo_null: list[torch.Tensor]       # per key/value group (v, v - d_in), empty unless v > d_in
    sizes: dict[str, int]             # coordinate block sizes, in order
    gain_basis: torch.Tensor | None = None   # (k, f) gain exchanges (qk_norm="gain")


def _check_supported(config: AttentionConfig) -> None:
    """Refuse a layer using a variant whose row does not declare the "symmetry" capability."""
    missing = variants.unsupported(config, "symmetry")
    if missing:
        raise NotImplementedError(
            f"idlib.symmetry: the group action for the variant(s) {variants.named(missing)} is "
            "not implemented here; their counts are checked against the measured rank instead")


def _kv_index(config: AttentionConfig) -> list[int]:
    """For each query head of the stack (layer-major, l * H + h): its key/value group and set."""
    H, G, m, S = config.n_heads, config.n_kv_heads, config.group_size, config.kv_share
    return [(i // H // S) * G + (i % H) // m for i in range(config.n_layers * H)]


HEAD_AXIS = ("W_Q", "W_O", "b_Q")        # one entry per query head (and layer of a stack)
GROUP_AXIS = ("W_K", "W_V", "b_K")       # one entry per key/value group (and set of a stack)
LINEAR = HEAD_AXIS + GROUP_AXIS + ("b_V",)   # what the GL blocks move (linear_action)


def _merged(config: AttentionConfig) -> set[str]:
    """Parameters indexed by both a stack axis and a head axis (their rows' ``axes``)."""
    if config.n_layers == 1:
        return set()
    return {n for n, (stack, head) in variants.axes(config).items() if stack and head}


def _flat(config: AttentionConfig, params: Params) -> Params:
    """Stacked parameters with (layer, head) and (set, group) merged into one axis."""
    merged = _merged(config)
    return {n: (p.reshape(-1, *p.shape[2:]) if n in merged else p) for n, p in params.items()}


def _unflat(config: AttentionConfig, flat: Params) -> Params:
    """Inverse of ``_flat``; a tensor's extra leading (batch) dimensions are kept in front."""
    out, merged = {}, _merged(config)
    for n, shape in param_shapes(config).items():
        m = n in merged
        lead = flat[n].shape[:flat[n].dim() - len(shape) + m]
        out[n] = flat[n].reshape(*lead, *shape)
    return out


def gain_exchange_basis(R: torch.Tensor) -> torch.Tensor:
    """(k, f) indicator columns of the dimensions that the rotations R(t) tie together.

    g_Q -> g_Q exp(s), g_K -> g_K exp(-s) keeps g_Q(i) g_K(j) R(t)_ij exactly when s is constant
    on every connected set of dimensions linked by a nonzero R_ij (R = R(1) decides all t).
    """
    k = R.shape[0]
    link = (R.abs() > 1e-12) | torch.eye(k, dtype=torch.bool)
    label = list(range(k))
    for _ in range(k):
        for i in range(k):
            for j in range(k):
                if link[i, j]:
                    label[i] = label[j] = min(label[i], label[j])
    roots = sorted(set(label))
    return torch.tensor([[1.0 if label[i] == r_ else 0.0 for r_ in roots] for i in range(k)], dtype=torch.float64)


def _centering_projector(config: AttentionConfig) -> torch.Tensor:
    d = config.d_model
    eye = torch.eye(d, dtype=torch.float64)
    return eye - torch.full((d, d), 1.0 / d, dtype=torch.float64) if config.input_centered else eye


@accepts(config=LAYER, params=PARAMS, frequencies=FREQUENCIES)
def chart(config: AttentionConfig, params: Params, frequencies: torch.Tensor | None = None) -> Chart:
    """The chart at ``params``: only its null moves (k or v > d) depend on the point, the rest
    on the config and the rotation (cached per config when ``frequencies`` is None)."""
    _check_supported(config)
    base = _config_chart(config) if frequencies is None else _rotation_chart(config, frequencies)
    k, v, d_in = config.head_dim, config.value_dim, config.input_dim
    if max(k, v) <= d_in:
        return base
    flat, P = _flat(config, params), _centering_projector(config)
    RG = config.n_kv_sets * config.n_kv_heads
    qk_null = [null_space(P @ flat["W_K"][g]) for g in range(RG)] if k > d_in else []
    vo_null = [null_space(P @ flat["W_V"][g]) for g in range(RG)] if v > d_in else []
    return replace(base, qk_null=qk_null, vo_null=vo_null)


def _rotation_chart(config: AttentionConfig, frequencies: torch.Tensor | None) -> Chart:
    """Everything of the chart but the null spaces (their block sizes included)."""
    d, G, k, v = config.d_model, config.n_kv_heads, config.head_dim, config.value_dim
    RG, LH = config.n_kv_sets * config.n_kv_heads, config.n_layers * config.n_heads
    d_in = config.input_dim
    R = rotation_matrix(config, 1.0, frequencies)
    qk_basis = commutant_basis(R)
    norm = variants.BY_NAME["qk_norm"].mode(config).data     # {} without QK-norm
    if norm.get("rotations"):                         # orthogonal part: E skew
        c = qk_basis.shape[0]
        sym = (qk_basis + qk_basis.transpose(-1, -2)).reshape(c, -1).T
        coef = null_space(sym)                        # combinations with E + E^T = 0
        qk_basis = torch.einsum("cn,cij->nij", coef, qk_basis)
    elif norm:                                        # gains: no rotation survives
        qk_basis = torch.zeros(0, k, k, dtype=torch.float64)
    k_fixed = null_space(R.T - torch.eye(k, dtype=torch.float64))
    a = d + 1 if config.has_bias("q") else d
    gain_basis = gain_exchange_basis(R) if norm.get("shared_gains") else None
    sizes = {"qk": RG * qk_basis.shape[0], "vo": RG * v * v,
             "qk_null": LH * a * (k - d_in) if k > d_in else 0,
             "vo_null": LH * (v - d_in) * d if v > d_in else 0,
             "b_K": RG * k_fixed.shape[1] if config.has_bias("k")
             and variants.forgives_row_constants(config) else 0,
             "b_V": G * v if config.has_bias("v") else 0,
             "qk_scale": LH + RG if norm else 0,
             "gain": config.n_kv_sets * gain_basis.shape[1] if gain_basis is not None else 0,
             "ones": (LH * k + RG * (k + v)) if config.input_centered else 0}
    return Chart(qk_basis, k_fixed, [], [], sizes, gain_basis)


@functools.lru_cache(maxsize=128)
def _config_chart(config: AttentionConfig) -> Chart:
    return _rotation_chart(config, None)


def n_coordinates(ch: Chart) -> int:
    return sum(ch.sizes.values())


def act(config: AttentionConfig, params: Params, coords: torch.Tensor, ch: Chart) -> Params:
    """The group element with coordinates ``coords`` (in ``ch``) applied to ``params``."""
    _check_supported(config)
    d, G = config.d_model, config.n_kv_heads
    k, v = config.head_dim, config.value_dim
    RG, LH, d_in = config.n_kv_sets * G, config.n_layers * config.n_heads, config.input_dim
    blocks, i = {}, 0
    for name, size in ch.sizes.items():
        blocks[name] = coords[i:i + size]
        i += size
    p = _flat(config, params)
    group = _kv_index(config)

    if ch.qk_null:                                   # [W_Q; b_Q] += Y N^T
        a = d + 1 if "b_Q" in p else d
        Y = blocks["qk_null"].reshape(LH, a, k - d_in)
        moves = torch.stack([Y[h] @ ch.qk_null[group[h]].T for h in range(LH)])
        p["W_Q"] = p["W_Q"] + moves[:, :d]
        if "b_Q" in p:
            p["b_Q"] = p["b_Q"] + moves[:, d]
    c_before = _value_constant(config, p) if "b_V" in p else None
    if ch.vo_null:                                   # W_O += M Y
        Y = blocks["vo_null"].reshape(LH, v - d_in, d)
        p["W_O"] = p["W_O"] + torch.stack([ch.vo_null[group[h]] @ Y[h] for h in range(LH)])
    if "b_V" in p:                                   # b_V += e, keeping c = sum_h b_V W_O^h
        m = config.group_size
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

    E, C = gl_blocks(config, coords, ch)
    p = _linear_flat(p, *_gl_maps(config, torch.linalg.matrix_exp(E), torch.linalg.matrix_exp(C)))
    if ch.sizes["b_K"]:
        p["b_K"] = p["b_K"] + blocks["b_K"].reshape(RG, -1) @ ch.k_fixed.T
    if ch.sizes["qk_scale"]:                         # normalised heads forget their scale
        sq, sk = blocks["qk_scale"][:LH].exp(), blocks["qk_scale"][LH:].exp()
        p["W_Q"] = p["W_Q"] * sq[:, None, None]
        p["W_K"] = p["W_K"] * sk[:, None, None]
        if "b_Q" in p:
            p["b_Q"] = p["b_Q"] * sq[:, None]
        if "b_K" in p:
            p["b_K"] = p["b_K"] * sk[:, None]
    if ch.sizes["gain"]:                             # g_Q exp(s), g_K exp(-s) per set
        s = blocks["gain"].reshape(config.n_kv_sets, -1) @ ch.gain_basis.T      # (sets, k)
        runs = [layer // config.kv_share for layer in range(config.n_layers)]
        p["g_Q"] = (p["g_Q"].reshape(-1, k) * s[runs].exp()).reshape(p["g_Q"].shape)
        p["g_K"] = (p["g_K"].reshape(-1, k) * (-s).exp()).reshape(p["g_K"].shape)
    if ch.sizes["ones"]:                             # components along the all-ones direction
        u = torch.full((d,), d ** -0.5, dtype=torch.float64)
        z = blocks["ones"]
        zq, zk, zv = z[:LH * k].reshape(LH, k), z[LH * k:(LH + RG) * k].reshape(RG, k), \
            z[(LH + RG) * k:].reshape(RG, v)
        p["W_Q"] = p["W_Q"] + u[None, :, None] * zq[:, None, :]
        p["W_K"] = p["W_K"] + u[None, :, None] * zk[:, None, :]
        p["W_V"] = p["W_V"] + u[None, :, None] * zv[:, None, :]
    return _unflat(config, p)


def _value_constant(config: AttentionConfig, p: Params) -> torch.Tensor:
    """c = sum_h b_V^{g(h)} W_O^h, the constant the value bias adds to every output."""
    m = config.group_size
    return torch.einsum("hv,hvd->d", p["b_V"].repeat_interleave(m, dim=0), p["W_O"])  # one layer


@accepts(config=LAYER, params=PARAMS, seed=SEED, scale=SCALE, frequencies=FREQUENCIES)
def random_group_element(config: AttentionConfig, params: Params, seed: int = 0,
                         scale: float = 0.5, frequencies: torch.Tensor | None = None) -> Params:
    """``params`` moved by a random element of the symmetry group (the output is unchanged)."""
    ch = chart(config, params, frequencies)
    gen = torch.Generator().manual_seed(seed)
    parts = []
    for name, size in ch.sizes.items():
        width = {"qk": config.head_dim, "vo": config.value_dim, "qk_scale": 1,
                 "gain": 1}.get(name, config.d_model)
        parts.append(scale / width ** 0.5 * torch.randn(size, generator=gen, dtype=torch.float64))
    return act(config, params, torch.cat(parts), ch)


def gl_blocks(config: AttentionConfig, coords: torch.Tensor,
              ch: Chart) -> tuple[torch.Tensor, torch.Tensor]:
    """The Lie algebra elements of the GL blocks of ``coords`` (..., n) (layout of ``act``):
    E_g = sum_c coords[g, c] E_c (..., sets G, k, k) and C_g (..., sets G, v, v)."""
    RG, v, c = config.n_kv_sets * config.n_kv_heads, config.value_dim, ch.qk_basis.shape[0]
    batch = coords.shape[:-1]
    E = torch.einsum("...gc,cij->...gij", coords[..., :RG * c].reshape(*batch, RG, c), ch.qk_basis)
    return E, coords[..., RG * c:RG * c + RG * v * v].reshape(*batch, RG, v, v)


def _linear_flat(p: Params, Q: torch.Tensor | None, K: torch.Tensor | None,
                 V: torch.Tensor | None, O: torch.Tensor | None) -> Params:
    """``linear_action`` on flat parameters (``_flat``); leading batch dimensions broadcast."""
    row = lambda b, M: (b[..., None, :] @ M)[..., 0, :]          # noqa: E731 (bias rows times M)
    out = dict(p)
    for name, M, bias in (("W_Q", Q, "b_Q"), ("W_K", K, "b_K"), ("W_V", V, "b_V")):
        if M is not None and name in p:
            out[name] = p[name] @ M
            if bias in p:
                out[bias] = row(p[bias], M)
    if O is not None:
        out["W_O"] = O @ p["W_O"]
    return out


def linear_action(config: AttentionConfig, params: Params, Q: torch.Tensor | None = None,
                  K: torch.Tensor | None = None, V: torch.Tensor | None = None,
                  O: torch.Tensor | None = None) -> Params:
    """One linear map per query head h (Q_h, O_h) and per key/value group g (K_g, V_g):

        W_Q^h -> W_Q^h Q_h,  W_K^g -> W_K^g K_g,  W_V^g -> W_V^g V_g,  W_O^h -> O_h W_O^h,

    biases b_Q, b_K, b_V as their weights; b_O, gains unchanged; None leaves a factor alone.
    Q, O: (..., L H, ., .), K, V: (..., sets G, ., .) over a stack's flat layer-major index.
    A symmetry exactly when Q_h = A_g(h), K_g = A_g^{-T}, V_g = B_g, O_h = B_g(h)^{-1}."""
    _check_supported(config)
    return _unflat(config, _linear_flat(_flat(config, params), Q, K, V, O))


def _gl_maps(config: AttentionConfig, A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, ...]:
    group = _kv_index(config)
    B_inv = torch.linalg.inv(B)
    return A[..., group, :, :], torch.linalg.inv(A).transpose(-1, -2), B, B_inv[..., group, :, :]


def gl_action(config: AttentionConfig, params: Params, A: torch.Tensor, B: torch.Tensor) -> Params:
    """The group element (A, B), A (sets G, k, k), B (sets G, v, v) invertible, one per group:
    W_Q^h -> W_Q^h A_g, W_K^g -> W_K^g A_g^{-T}, W_V^g -> W_V^g B_g, W_O^h -> B_g^{-1} W_O^h
    (g = g(h); biases as their weights). A must commute with the rotations under RoPE."""
    return linear_action(config, params, *_gl_maps(config, A, B))


def gl_tangent(config: AttentionConfig, params: Params, E: torch.Tensor, C: torch.Tensor) -> Params:
    """d/dt gl_action(exp(tE), exp(tC)) at t = 0, the tangent vector xi_{E,C}:
    dW_Q^h = W_Q^h E_g, dW_K^g = -W_K^g E_g^T, dW_V^g = W_V^g C_g, dW_O^h = -C_g W_O^h (biases
    alike, every other tensor 0). Leading batch dimensions of E, C lead every output tensor."""
    group, batch = _kv_index(config), E.shape[:-3]
    xi = linear_action(config, params, E[..., group, :, :], -E.transpose(-1, -2), C,
                       -C[..., group, :, :])
    moved = LINEAR
    return {n: xi[n] if n in moved else torch.zeros(*batch, *p.shape, dtype=p.dtype)
            for n, p in params.items()}


@accepts(config=LAYER, params=PARAMS, frequencies=FREQUENCIES)
def orbit_generators(config: AttentionConfig, params: Params,
                     frequencies: torch.Tensor | None = None) -> torch.Tensor:
    """d act / d coords at 0: (n_params, n_coordinates), columns spanning the orbit tangent.

    In closed form (columns gl_tangent(e_i)) when the chart has only the GL blocks, the action
    then being linear in the Lie algebra; by forward-mode autodiff of ``act`` otherwise."""
    ch = chart(config, params, frequencies)
    n = n_coordinates(ch)
    if gl_only(ch):
        xi = gl_tangent(config, params, *gl_blocks(config, torch.eye(n, dtype=torch.float64), ch))
        return torch.cat([t.reshape(n, -1) for t in xi.values()], dim=1).T
    zero = torch.zeros(n, dtype=torch.float64)
    return torch.func.jacfwd(lambda c: flatten(act(config, params, c, ch)))(zero)


def gl_only(ch: Chart) -> bool:
    """True when the chart has only the GL (or commutant) blocks: no null, bias, scale moves."""
    return all(size == 0 for name, size in ch.sizes.items() if name not in ("qk", "vo"))


@accepts(config=LAYER, params=PARAMS, frequencies=FREQUENCIES, rtol=TOLERANCE)
def tangent_basis(config: AttentionConfig, params: Params,
                  frequencies: torch.Tensor | None = None, rtol: float = 1e-9) -> torch.Tensor:
    """Orthonormal basis (n_params, u) of the orbit's tangent space: the unidentified directions."""
    T = orbit_generators(config, params, frequencies)
    U, s, _ = torch.linalg.svd(T, full_matrices=False)
    return U[:, : int((s > rtol * s.max()).sum())]


@accepts(config=LAYER, params=PARAMS, head_perm=HEAD_PERMUTATION)
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
    missing = variants.unsupported(config, "permute_heads")
    if missing:
        raise ValueError(f"permute_heads: relabelling heads is not a symmetry with the variant(s) "
                         f"{variants.named(missing)} (they depend on the head index)")
    out, axes = {}, variants.axes(config)
    for name, value in params.items():
        stack, head = axes[name]
        axis = 1 if config.n_layers > 1 and stack else 0   # a stack: the same relabelling per layer
        perm = {"head": list(head_perm), "group": gp}.get(head)
        out[name] = value if perm is None else value[(slice(None),) * axis + (perm,)]
    return out


@accepts(config=LAYER, params=PARAMS, seed=SEED, scale=SCALE)
def whole_norm_action(config: AttentionConfig, params: dict[str, torch.Tensor], seed: int = 0,
                      scale: float = 0.5) -> dict[str, torch.Tensor]:
    """A random element of the symmetry group of a layer with qk_norm="whole" (chapter 9):
    all queries scaled by e^a and all keys by e^b (the norm forgets both), per key/value group
    g_Q of its heads times e^s and g_K times e^-s with s constant on each rotation plane, and
    GL(v) per group on V/O (W_V B, b_V B, B^{-1} W_O)."""
    gen = torch.Generator().manual_seed(seed)
    rnd = lambda *shape: scale * torch.randn(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    H, G, k, v, m, r = (config.n_heads, config.n_kv_heads, config.head_dim, config.value_dim,
                        config.group_size, config.rotary_dim)
    p = dict(params)
    a, b = rnd(2).exp()
    p["W_Q"], p["W_K"] = p["W_Q"] * a, p["W_K"] * b
    if "b_Q" in p:
        p["b_Q"] = p["b_Q"] * a
    if "b_K" in p:
        p["b_K"] = p["b_K"] * b
    half = rnd(G, r // 2)                              # one exponent per plane (i, i + r/2)
    s = torch.cat([half, half, rnd(G, k - r)], dim=1)  # and one per pass-through dim
    p["g_Q"] = p["g_Q"] * s.repeat_interleave(m, dim=0).exp()
    p["g_K"] = p["g_K"] * (-s).exp()
    B = torch.eye(v, dtype=torch.float64) + rnd(G, v, v) / v ** 0.5
    Bh = B.repeat_interleave(m, dim=0)
    p["W_V"] = p["W_V"] @ B
    p["W_O"] = torch.linalg.solve(Bh, p["W_O"])
    if "b_V" in p:
        p["b_V"] = torch.einsum("gv,gvw->gw", p["b_V"], B)
    return p


@accepts(config=LAYER, params=PARAMS, seed=SEED, scale=SCALE)
def random_element(config: AttentionConfig, params: Params, seed: int = 0,
                   scale: float = 0.5) -> Params:
    """``params`` moved by a random element of the layer's symmetry group: the chart's action
    (:func:`random_group_element`) where every row declares "symmetry", the action of QK-norm over
    all heads (:func:`whole_norm_action`, chapter 9) for such a layer; NotImplementedError naming
    the variants otherwise."""
    if variants.supports(config, "symmetry"):
        return random_group_element(config, params, seed, scale)
    whole = variants.BY_NAME["qk_norm"].mode(config).data.get("whole")
    if whole and variants.supports(config.replace(qk_norm="none"), "symmetry"):
        return whole_norm_action(config, params, seed, scale)
    _check_supported(config)
    raise AssertionError("unreachable")  # pragma: no cover
