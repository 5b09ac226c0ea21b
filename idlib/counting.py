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
"""
from __future__ import annotations

import cmath
import math
from dataclasses import dataclass

import torch

from .config import AttentionConfig

COMPONENTS = ("qk", "vo", "b_Q", "b_K", "b_V", "b_O")


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


def count(config: AttentionConfig, frequencies: torch.Tensor | None = None) -> Count:
    """Total, identified and unidentified parameters of one layer, by component."""
    from .attention import rope_frequencies

    d, H, G, m = config.d_model, config.n_heads, config.n_kv_heads, config.group_size
    k, v, r = config.head_dim, config.value_dim, config.rotary_dim
    has = config.has_bias
    a = d + 1 if has("q") else d

    if r:  # k <= d (the config refuses wider rotary heads)
        freqs = rope_frequencies(config) if frequencies is None else frequencies
        qk_fiber = rope_commutant_dim(freqs, k - r)
        q_bias_fiber = 0
        _, k_bias_fixed, _ = rotation_classes(freqs, k - r)
    else:
        qk_fiber = factor_fiber(d, d, k, m)
        q_bias_fiber = factor_fiber(a, d, k, m) - qk_fiber
        k_bias_fixed = k
    vo_fiber = factor_fiber(d, d, v, m)
    if has("v"):
        v_bias_unid = G * v if has("o") else G * v - min(d, G * v)

    comps = [ComponentCount("qk", (H + G) * d * k, G * qk_fiber),
             ComponentCount("vo", (H + G) * d * v, G * vo_fiber)]
    if has("q"):
        comps.append(ComponentCount("b_Q", H * k, G * q_bias_fiber))
    if has("k"):
        comps.append(ComponentCount("b_K", G * k, G * k_bias_fixed))
    if has("v"):
        comps.append(ComponentCount("b_V", G * v, v_bias_unid))
    if has("o"):
        comps.append(ComponentCount("b_O", d, 0))
    return Count(config, tuple(comps))


def unidentified_ratio_mha(n_heads: int) -> float:
    """The paper's share for plain multi-head attention with head_dim = value_dim = d/H: 1/(2H)."""
    return 1.0 / (2 * n_heads)
