"""Closed-form counts: total, identified and unidentified parameters, per component.

Notation: width d, H query heads in G groups of m = H/G, query/key width k, value width v,
r = rotary dims per head. Every count below is derived in the book (chapters 1-5):

* QK of a group.  The layer sees only the products W_Q^h R(t) W_K^T.  Without RoPE the fiber of
  (L_1..L_m in R^{a x k}, R in R^{b x k}) -> (L_h R^T) has dimension ``factor_fiber(a, b, k, m)``;
  k^2 (the group GL(k)) when k <= b.  With RoPE (k <= d) it is the commutant of the rotations.
* Key bias.  softmax ignores per-row constants, so b_K is unidentified except for the part that
  RoPE rotates: ``fixed_dim`` unidentified dims per group (all k without RoPE).
* VO of a group.  The layer sees W_V W_O^h: fiber ``factor_fiber(d, d, v, m)``.
* Value bias.  It only adds the constant c = sum_h b_V^g W_O^h; with an output bias that is
  absorbed (all G v unidentified), otherwise c moves in min(d, G v) identified directions.

Variants (chapter 7, ``07_variants``), written with d_in = d (d - 1 with input_centered), the
key/value input width b (d_in, or the latent width C when it compresses), and m' = kv_share * m
query heads per key/value group and set:

* QK-norm (k <= d_in, and k <= C with a latent): a QK move must keep every normalised query
  and key on its sphere, so A = c O.  Per group and set: dim(O(k) cap commutant of RoPE)
  (``orthogonal_commutant_dim``; 0 with generic gains) + m' + 1 scalings (one per query head,
  one per key group).  The biases are all identified.  Gains: only g_Q(i) g_K(j) with R(t)_ij
  != 0 are seen: ``gain_fiber`` (k without RoPE, k - r/2 with distinct frequencies) per set.
* Latent K/V (``latent_fiber``): GL(C) on the latent when C < min(d_in, G (k + v)); otherwise
  the factorisation of d_in x G(k+v) through C; latent_norm: O(C) and one scale.
* Centred inputs: the all-ones components of W_Q, W_K, W_V (W_DKV) are invisible; the rest is
  a layer with input width d_in = d - 1.
* Cross-layer K/V sharing: the S layers of a run share the group's GL(k), GL(v): the
  single-layer fibers with m replaced by S m, once per set.
"""
from __future__ import annotations

import cmath
import math
from dataclasses import dataclass

import torch

from .config import AttentionConfig

COMPONENTS = ("qk", "vo", "latent", "b_Q", "b_K", "b_V", "b_O", "g_QK")


@dataclass(frozen=True)
class ComponentCount:
    name: str
    total: int
    unidentified: int

    @property
    def identified(self) -> int:
        return self.total - self.unidentified


@dataclass(frozen=True)
class Count:
    """The closed-form count of one configuration."""

    config: AttentionConfig
    components: tuple[ComponentCount, ...]

    @property
    def total(self) -> int:
        return sum(c.total for c in self.components)

    @property
    def unidentified(self) -> int:
        return sum(c.unidentified for c in self.components)

    @property
    def identified(self) -> int:
        return self.total - self.unidentified

    @property
    def ratio(self) -> float:
        """Unidentified share, unidentified / total."""
        return self.unidentified / self.total

    def component(self, name: str) -> ComponentCount:
        return next(c for c in self.components if c.name == name)

    def to_dict(self) -> dict:
        return {"total": self.total, "identified": self.identified,
                "unidentified": self.unidentified, "ratio": self.ratio,
                "components": {c.name: {"total": c.total, "identified": c.identified,
                                        "unidentified": c.unidentified} for c in self.components}}


def factor_fiber(a: int, b: int, k: int, m: int) -> int:
    """dim of the generic fiber of (L_1..L_m, R) -> (L_1 R^T, .., L_m R^T), L_h: a x k, R: b x k.

    k <= b: the fiber is {(L_h + dL_h, R + dR)} with dR = R E restricted by the s = min(k, m a)
    directions the L_h see: s k + (k - s) b (= k^2, the Lie algebra gl(k), when k <= m a).
    k > b: R^T is injective, every dR is compensated and each L_h may move in its a (k - b)
    directions that R^T does not see: b k + m a (k - b).
    """
    if k <= b:
        s = min(k, m * a)
        return s * k + (k - s) * b
    return b * k + m * a * (k - b)


def rotation_classes(frequencies: torch.Tensor | list[float], pass_dims: int,
                     tol: float = 1e-9) -> tuple[list[int], int, int]:
    """Group the rotation planes by the eigenvalue z = e^{i theta} of the offset-1 rotation.

    Returns (multiplicities of the complex classes {z, conj z}, dims fixed by every rotation
    (eigenvalue +1: pass-through dims and planes with theta = 0 mod 2 pi), dims with eigenvalue
    -1 (planes with theta = pi mod 2 pi)).  Offsets are integers, so R(t) = R(1)^t and the
    classes at t = 1 decide every commutant (sequence length >= 2).
    """
    classes: list[tuple[complex, int]] = []
    plus, minus = pass_dims, 0
    for theta in [float(x) for x in frequencies]:
        z = cmath.exp(1j * theta)
        if abs(z - 1) < tol:
            plus += 2
        elif abs(z + 1) < tol:
            minus += 2
        else:
            for i, (w, mult) in enumerate(classes):
                if abs(z - w) < tol or abs(z - w.conjugate()) < tol:
                    classes[i] = (w, mult + 1)
                    break
            else:
                classes.append((z, 1))
    return [mult for _, mult in classes], plus, minus


def rope_commutant_dim(frequencies: torch.Tensor | list[float], pass_dims: int) -> int:
    """dim of {A : A R(t) = R(t) A for all integer t}: sum over classes 2 mu^2 + nu_+^2 + nu_-^2.

    mu planes sharing one frequency form C^mu, whose commutant is GL(mu, C) (2 mu^2 real dims);
    a real eigenvalue of multiplicity nu contributes GL(nu) (nu^2 dims).
    """
    complex_mults, plus, minus = rotation_classes(frequencies, pass_dims)
    return sum(2 * mu * mu for mu in complex_mults) + plus * plus + minus * minus


def orthogonal_commutant_dim(frequencies: torch.Tensor | list[float], pass_dims: int) -> int:
    """dim of the orthogonal matrices commuting with RoPE: sum mu^2 + nu_+(nu_+-1)/2 + nu_-(nu_- -1)/2.

    A class of mu planes with one frequency is C^mu: orthogonal and complex-linear is U(mu).
    """
    complex_mults, plus, minus = rotation_classes(frequencies, pass_dims)
    return sum(mu * mu for mu in complex_mults) + plus * (plus - 1) // 2 + minus * (minus - 1) // 2


def gain_fiber(frequencies: torch.Tensor | list[float], pass_dims: int) -> int:
    """Unidentified dims of the shared gains (g_Q, g_K): the layer sees g_Q(i) g_K(j) R(t)_ij.

    Each dimension not mixed by any rotation (pass-through, or a plane with theta = 0 or pi mod
    2 pi) gives one exchange g_Q(i) -> c g_Q(i), g_K(i) -> g_K(i) / c; each rotating plane ties
    its two dimensions together and gives one.
    """
    complex_mults, plus, minus = rotation_classes(frequencies, pass_dims)
    return sum(complex_mults) + plus + minus


def latent_fiber(d_in: int, C: int, N: int, latent_norm: bool) -> tuple[int, int, int]:
    """(b, latent fiber, extra per up-projection column) of the latent map W_DKV (d_in x C).

    N = G (k + v) columns read the latent.  latent_norm (2 <= C <= d_in): the norm reveals
    W_DKV W_DKV^T, leaving O(C) and the scale of W_DKV: C (C - 1) / 2 + 1; b = C.
    Otherwise C < min(d_in, N): the latent is a true bottleneck, GL(C) acts freely: C^2, b = C.
    C >= min(d_in, N): the effective W_K, W_V = W_DKV W_U are generic, the fiber of the factorisation
    (d_in x C)(C x N): d_in C + C N - d_in N; b = d_in.  Its part in W_DKV is min(d_in C, that); the
    rest, (C - d_in) per column when C > d_in, moves the up-projections inside null(W_DKV).
    """
    if latent_norm:
        return C, C * (C - 1) // 2 + 1, 0
    if C < min(d_in, N):
        return C, C * C, 0
    if C <= d_in:
        return d_in, d_in * C + C * N - d_in * N, 0
    return d_in, d_in * C, C - d_in


def count(config: AttentionConfig, frequencies: torch.Tensor | None = None) -> Count:
    """Total, identified and unidentified parameters of one layer (or stack), by component."""
    from .attention import rope_frequencies

    d, H, G, m = config.d_model, config.n_heads, config.n_kv_heads, config.group_size
    k, v, r = config.head_dim, config.value_dim, config.rotary_dim
    L, R = config.n_layers, config.n_kv_sets
    mm = config.kv_share * m             # query heads reading one key/value group of one set
    has = config.has_bias
    d_in = config.input_dim
    C = config.kv_latent
    centred = 1 if config.input_centered else 0

    if C is None:
        b, lat_fiber, extra = d_in, 0, 0
    else:
        b, lat_fiber, extra = latent_fiber(d_in, C, G * (k + v), config.latent_norm)
    a = d_in + 1 if has("q") else d_in
    freqs = None
    if r:
        freqs = rope_frequencies(config) if frequencies is None else frequencies

    gain_unid = 0
    if config.qk_norm != "none":      # k <= min(d_in, b) (the config refuses wider heads)
        ortho = 0
        if config.qk_norm == "plain":
            ortho = orthogonal_commutant_dim(freqs, k - r) if r else k * (k - 1) // 2
        else:
            gain_unid = gain_fiber(freqs, k - r) if r else k
        qk_fiber = ortho + mm + 1
        q_bias_fiber, k_bias_fixed = 0, 0
    elif r:  # k <= min(d_in, b) (the config refuses wider rotary heads)
        qk_fiber = rope_commutant_dim(freqs, k - r)
        q_bias_fiber = 0
        _, k_bias_fixed, _ = rotation_classes(freqs, k - r)
    else:
        qk_fiber = factor_fiber(d_in, b, k, mm)
        q_bias_fiber = factor_fiber(a, b, k, mm) - qk_fiber
        k_bias_fixed = k
    vo_fiber = factor_fiber(d, b, v, mm)
    if has("v"):
        v_bias_unid = G * v if has("o") else G * v - min(d, G * v)

    if has("v") and not has("o") and v > b:
        # the null moves W_O^h += M Y (W_V M = 0) shift the constant c = sum_h b_V W_O^h in all
        # d directions; without an output bias the value bias can undo only G v of them
        vo_fix = max(0, d - G * v)
    else:
        vo_fix = 0
    kv_in = d if C is None else C      # rows of W_K, W_V (or W_UK, W_UV)
    qk_ones = centred * (L * H * k + (R * G * k if C is None else 0))
    vo_ones = centred * (R * G * v if C is None else 0)
    comps = [ComponentCount("qk", L * H * d * k + R * G * kv_in * k,
                            R * G * (qk_fiber + extra * k) + qk_ones),
             ComponentCount("vo", L * H * d * v + R * G * kv_in * v,
                            R * G * (vo_fiber + extra * v) + vo_ones - vo_fix)]
    if C is not None:
        comps.append(ComponentCount("latent", d * C, lat_fiber + centred * C))
    if has("q"):
        comps.append(ComponentCount("b_Q", L * H * k, R * G * q_bias_fiber))
    if has("k"):
        comps.append(ComponentCount("b_K", R * G * k, R * G * k_bias_fixed))
    if has("v"):
        comps.append(ComponentCount("b_V", G * v, v_bias_unid))
    if has("o"):
        comps.append(ComponentCount("b_O", d, 0))
    if config.qk_norm == "gain":
        comps.append(ComponentCount("g_QK", (L + R) * k, R * gain_unid))
    return Count(config, tuple(comps))


def unidentified_ratio_mha(n_heads: int) -> float:
    """The paper's share for plain multi-head attention with head_dim = value_dim = d/H: 1/(2H)."""
    return 1.0 / (2 * n_heads)
