"""Closed-form counts: total, identified and unidentified parameters, per component.

Notation: width d, H query heads in G groups of m = H/G, query/key width k, value width v,
r = rotary dims per head. Every count below is derived in the book (chapters 1-5):

* QK of a group.  The layer sees only the products W_Q^h R(t) W_K^T.  Without RoPE the fiber of
  (L_1..L_m in R^{a x k}, R in R^{b x k}) -> (L_h R^T) has dimension ``factor_fiber(a, b, k, m)``;
  k^2 (the group GL(k)) when k <= b.  With RoPE (k <= d) it is the commutant of the rotations.
* Key bias.  softmax ignores per-row constants, so b_K is unidentified except for the part that
  RoPE rotates: the dims fixed by every rotation (nu_+) are unidentified per group (all k
  without RoPE).
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

Chapter 9 (``09_implementations``):

* QK-norm over all heads (qk_norm="whole", OLMo 2; one layer, H k <= d_in): one scale for all
  queries and one for all keys (2 in all), no rotation survives the per-dim gains, the biases
  are identified; gains: ``gain_fiber`` per key/value group (g_Q of its m heads against g_K).
* Soft-capped scores (softcap): c tanh(s / c) sees row constants, so the key bias is
  identified (its fixed dims no longer unidentified); nothing else changes (k <= d_in).
* Multi-head latent attention (``LatentAttentionConfig``, DeepSeek; ``count_latent``): each
  normalised latent (width C_Q or C) forgets the scale of its down projection and any rotation
  of it, and its gain is absorbed by the up projection: 1 + C (C - 1) / 2 + C per latent
  (the group R_+ x O(C) x R_+^C).  Per head GL(n) on the no-RoPE query/key parts and GL(v) on
  value/output: H (n^2 + v^2).  The RoPE parts: the commutant of the rotations, once, since the
  RoPE key is shared by all heads (p with distinct frequencies).  The biases are identified but
  for the RoPE key bias's dims fixed by every rotation.

Rotation classes (``layer_classes``): planes whose offset-1 rotations agree up to conjugation
(within ROTATION_TOL) form one class.  Explicit frequencies are sorted (O(P log P), P planes);
the standard ones base^(-2i/r) are grouped in closed form (``_standard_classes``, O(distinct
class sizes)), so any width the config accepts (up to 2**53) is counted at once.

Which layers have a derived count is decided here, beside the formulas (``check_derived``):
``count`` refuses the others with a ConfigError naming the rule.
"""
from __future__ import annotations

from dataclasses import dataclass

from .lazy import torch

from . import variants
from .config import AttentionConfig, ConfigError, LatentAttentionConfig
from . import fibers
from .arguments import ANGLES, ANY_LAYER, FREQUENCIES, LAYER, NONNEGATIVE, TOLERANCE, accepts
from .fibers import (CLOSED_FORM_PLANES, MAX_CLASS_SIZES, MAX_TABULATED_PLANES,  # noqa: F401
                     ROTATION_TOL, Classes, _classes, _commutant, _delta, _gain_fiber, _group,
                     _orthogonal_commutant, _standard_classes, factor_fiber, latent_fiber)

# the rotation-class formulas of idlib.fibers, their arguments checked (the public spelling)
rotation_classes = accepts(frequencies=ANGLES, pass_dims=NONNEGATIVE, tol=TOLERANCE)(
    fibers.rotation_classes)
rope_commutant_dim = accepts(frequencies=ANGLES, pass_dims=NONNEGATIVE)(fibers.rope_commutant_dim)
orthogonal_commutant_dim = accepts(frequencies=ANGLES, pass_dims=NONNEGATIVE)(
    fibers.orthogonal_commutant_dim)
gain_fiber = accepts(frequencies=ANGLES, pass_dims=NONNEGATIVE)(fibers.gain_fiber)
layer_classes = accepts(config=LAYER, frequencies=FREQUENCIES)(fibers.layer_classes)

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

    config: AttentionConfig | LatentAttentionConfig
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
    def share(self) -> float:
        """The unidentified share, U / P = unidentified / total."""
        return self.unidentified / self.total

    @property
    def ratio(self) -> float:
        """The unidentified share under its old name (``share``)."""
        return self.share

    def component(self, name: str) -> ComponentCount:
        return next(c for c in self.components if c.name == name)

    def to_dict(self) -> dict:
        return {"total": self.total, "identified": self.identified,
                "unidentified": self.unidentified, "share": self.share,
                "components": {c.name: {"total": c.total, "identified": c.identified,
                                        "unidentified": c.unidentified} for c in self.components}}


# -- which layers have a derived count -----------------------------------------------------

def check_derived(config: AttentionConfig) -> None:
    """Refuse (ConfigError naming the rule) a valid layer whose count is not derived in the book:
    the first rule that a row the layer uses states (``idlib.variants.refusal``)."""
    reason = variants.refusal(config)
    if reason is not None:
        raise ConfigError(reason)


@accepts(config=ANY_LAYER, frequencies=FREQUENCIES)
def count(config: AttentionConfig | LatentAttentionConfig,
          frequencies: torch.Tensor | list[float] | None = None) -> Count:
    """Total, identified and unidentified parameters of one layer (or stack), by component.

    ``frequencies``: RoPE angles per plane instead of the standard base^(-2i/r) (rotary_dim / 2
    of them).  A layer whose count is not derived is refused (``check_derived``).  A latent
    attention layer is counted by :func:`count_latent`.  The count is built by the rows of
    :mod:`idlib.variants` the layer uses, phase by phase (widths, fibers, components).
    """
    if isinstance(config, LatentAttentionConfig):
        return count_latent(config, frequencies)
    check_derived(config)
    if frequencies is not None and not config.rotary_dim:
        layer_classes(config, frequencies)          # a layer without RoPE: only [] fits
    tally = variants.Tally(config, frequencies)
    for phase in variants.PHASES:
        for hook in variants.count_hooks(config, phase):
            hook(tally)
    return Count(config, tuple(ComponentCount(*c) for c in tally.components))


def unidentified_ratio_mha(n_heads: int) -> float:
    """The paper's share for plain multi-head attention with head_dim = value_dim = d/H: 1/(2H)."""
    return 1.0 / (2 * n_heads)


# -- multi-head latent attention (chapter 9) ------------------------------------------------

def check_derived_latent(config: LatentAttentionConfig) -> None:
    """Refuse (ConfigError naming the rule) a latent layer outside the derivation of count_latent:
    each latent 2 <= C <= d_model and read whole by its up projections (C_Q <= H (n + p),
    C <= H (n + v)); the heads no wider than what they read (n <= min(a_Q, C), v <= min(d, C),
    p <= min(a_Q, d), a_Q = q_latent or d_model)."""
    d, H, C, CQ = config.d_model, config.n_heads, config.kv_latent, config.q_latent
    n, p, v, a = config.nope_dim, config.rope_dim, config.value_dim, config.query_input
    for name, width, readers in (("kv_latent", C, H * (n + v)), ("q_latent", CQ, H * (n + p))):
        if width is None:
            continue
        if not 2 <= width <= d:
            raise ConfigError(f"{name}={width} must be in 2..d_model={d} (the count for a latent "
                              "wider than the model, or of one dimension, is not derived)")
        if width > readers:
            raise ConfigError(f"{name}={width} must be at most the {readers} dims its up "
                              "projections write (the count for a latent they cannot all see is "
                              "not derived)")
    for name, width, limit, what in (("nope_dim", n, min(a, C), "the query input and kv_latent"),
                                     ("value_dim", v, min(d, C), "d_model and kv_latent"),
                                     ("rope_dim", p, min(a, d), "the query input and d_model")):
        if width > limit:
            raise ConfigError(f"{name}={width} must be at most {limit} ({what}): the count for a "
                              "head wider than what it reads is not derived")


def latent_rope_classes(config: LatentAttentionConfig,
                        frequencies: torch.Tensor | list[float] | None = None) -> Classes:
    """The rotation classes of the RoPE parts: a fully rotary head of rope_dim dims."""
    return layer_classes(config.rope_head(), frequencies)


def count_latent(config: LatentAttentionConfig,
                 frequencies: torch.Tensor | list[float] | None = None) -> Count:
    """The closed form of multi-head latent attention (see the module docstring), by component.

    latent (C_Q, C): d C + C parameters (down projection and gain), 1 + C (C - 1) / 2 + C
    unidentified; qk: H n (a_Q + C), H n^2; rope: H p a_Q + d p, the RoPE commutant (p with
    distinct frequencies); vo: H v (C + d), H v^2; biases (``bias``): b_DQ, b_DKV, b_O
    identified, b_KR unidentified in its dims fixed by every rotation.
    """
    check_derived_latent(config)
    d, H, C, CQ = config.d_model, config.n_heads, config.kv_latent, config.q_latent
    n, p, v, a = config.nope_dim, config.rope_dim, config.value_dim, config.query_input
    classes = latent_rope_classes(config, frequencies)
    normalised = lambda width: 1 + width * (width - 1) // 2 + width  # noqa: E731 (R_+ x O x gains)
    comps = []
    if CQ is not None:
        comps.append(ComponentCount("q_latent", d * CQ + CQ, normalised(CQ)))
    comps += [ComponentCount("kv_latent", d * C + C, normalised(C)),
              ComponentCount("qk", H * n * (a + C), H * n * n),
              ComponentCount("rope", H * p * a + d * p, _commutant(classes)),
              ComponentCount("vo", H * v * (C + d), H * v * v)]
    if config.bias:
        if CQ is not None:
            comps.append(ComponentCount("b_DQ", CQ, 0))
        comps += [ComponentCount("b_DKV", C, 0), ComponentCount("b_KR", p, classes[1]),
                  ComponentCount("b_O", d, 0)]
    return Count(config, tuple(comps))
