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

import math
from collections import Counter
from dataclasses import dataclass

import torch

from .attention import rope_frequencies
from .config import AttentionConfig, ConfigError, LatentAttentionConfig

ROTATION_TOL = 1e-9             # two rotations are one class when |e^{i theta} - e^{i theta'}| < this
MAX_TABULATED_PLANES = 1 << 22  # frequencies held as a tensor (explicit, or a base below 1)
CLOSED_FORM_PLANES = 1 << 12    # standard frequencies beyond this many planes: classes in closed form
MAX_CLASS_SIZES = 20_000        # distinct class sizes the closed form walks through (standard RoPE)


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


# -- rotation classes ------------------------------------------------------------------------
# The offset-1 rotation R(1) has, per plane i, the eigenvalues e^{+-i theta_i}.  Planes whose
# eigenvalues agree up to conjugation (|z - w| < ROTATION_TOL or |z - conj w| < ROTATION_TOL) form
# one class: with phi = the angle reduced to [0, pi], |z - w| = 2 sin(|phi - phi'| / 2), so a
# class is a run of sorted reduced angles within DELTA = 2 asin(tol / 2) of its largest (its
# representative).  Angles within DELTA of 0 (of pi) have eigenvalue +1 (-1).
# Classes = (Counter {multiplicity mu: number of classes}, dims with eigenvalue +1, with -1).
Classes = tuple[Counter, int, int]


def _delta(tol: float) -> float:
    return 2.0 * math.asin(tol / 2.0)


def _group(frequencies: torch.Tensor | list[float], tol: float) -> tuple[list[int], int, int]:
    """(multiplicities in order of first appearance, planes at +1, planes at -1): sort, O(P log P)."""
    theta = torch.as_tensor(frequencies, dtype=torch.float64).reshape(-1)
    if not bool(torch.isfinite(theta).all()):
        raise ConfigError("frequencies must be finite numbers")
    phi = torch.atan2(torch.sin(theta).abs(), torch.cos(theta))          # in [0, pi]
    delta = _delta(tol)
    plus, minus = phi < delta, (math.pi - phi) < delta
    rest = (~plus & ~minus).nonzero().reshape(-1)
    vals, order = phi[rest].sort(descending=True, stable=True)
    n = vals.numel()
    label = torch.zeros(n, dtype=torch.long)
    if n:
        gaps = vals[:-1] - vals[1:]                         # >= 0
        new = torch.cat([torch.tensor([True]), gaps >= delta])
        label = new.cumsum(0) - 1                           # runs joined by gaps < delta ...
        runs = torch.bincount(label)
        if bool((runs > 1).any()):                          # ... split at DELTA from their head
            asc = (-vals).contiguous()
            label = torch.empty(n, dtype=torch.long)
            i, c = 0, 0
            while i < n:
                j = int(torch.searchsorted(asc, asc[i] + delta, side="left"))
                label[i:j] = c
                i, c = max(j, i + 1), c + 1
    first = torch.full((int(label.max()) + 1 if n else 0,), len(phi), dtype=torch.long)
    first = first.scatter_reduce(0, label, rest[order], reduce="amin") if n else first
    mults = torch.bincount(label, minlength=first.numel()) if n else torch.zeros(0, dtype=torch.long)
    firsts, sizes = first.tolist(), mults.tolist()
    return ([sizes[c] for c in sorted(range(len(sizes)), key=firsts.__getitem__)],
            int(plus.sum()), int(minus.sum()))


def _standard_classes(planes: int, base: float, tol: float = ROTATION_TOL) -> Classes:
    """Classes of theta_i = base^(-i/P), i < P = planes, in O(distinct class sizes).

    base = 1: one class of P.  base > 1: theta_s = e^{-c s}, c = ln(base) / P, decreasing in
    (0, 1]; planes with theta < DELTA sit at +1; the class headed by plane s holds the n(s) =
    ceil(x(s)) planes s <= j < s + x(s), x(s) = -ln(1 - DELTA / theta_s) / c, and n(s') <= n
    exactly for s' <= S(n) = ln((1 - e^{-c n}) / DELTA) / c, so classes of one size come in runs.
    """
    if planes == 0:
        return Counter(), 0, 0
    if base == 1.0:
        return Counter({planes: 1}), 0, 0
    delta, c = _delta(tol), math.log(base) / planes
    n_rot = min(planes, max(0, math.floor(math.log(1.0 / delta) / c) + 1))   # theta >= DELTA
    mults: Counter = Counter()
    s, steps = 0, 0
    while s < n_rot:
        steps += 1
        if steps > MAX_CLASS_SIZES:
            raise ConfigError(
                f"rotary planes={planes} with rope_base={base:g}: adjacent frequencies closer than "
                f"the tolerance {tol:g} form more than {MAX_CLASS_SIZES} class sizes; this count is "
                "not computed (use fewer rotary dimensions)")
        ratio = delta / math.exp(-c * s)
        x = math.inf if ratio >= 1 else -math.log1p(-ratio) / c
        size = max(1, min(n_rot - s, math.ceil(x)))
        last = math.log(-math.expm1(-c * size) / delta) / c                     # S(size)
        runs = max(1, min(math.floor((last - s) / size) + 1, -(-(n_rot - s) // size)))
        full = min(runs, (n_rot - s) // size)
        mults[size] += full
        if full < runs:                                   # the last class, cut at the +1 planes
            mults[n_rot - s - full * size] += 1
        s += runs * size
    return mults, 2 * (planes - n_rot), 0


def _classes(frequencies: torch.Tensor | list[float], pass_dims: int, tol: float) -> Classes:
    mults, plus, minus = _group(frequencies, tol)
    return Counter(mults), pass_dims + 2 * plus, 2 * minus


def rotation_classes(frequencies: torch.Tensor | list[float], pass_dims: int,
                     tol: float = ROTATION_TOL) -> tuple[list[int], int, int]:
    """Group the rotation planes by the eigenvalue z = e^{i theta} of the offset-1 rotation.

    Returns (multiplicities of the complex classes {z, conj z}, in order of first appearance,
    dims fixed by every rotation (eigenvalue +1: pass-through dims and planes with theta = 0 mod
    2 pi), dims with eigenvalue -1 (planes with theta = pi mod 2 pi)).  Offsets are integers, so
    R(t) = R(1)^t and the classes at t = 1 decide every commutant (sequence length >= 2).
    Sorted, O(P log P).
    """
    mults, plus, minus = _group(frequencies, tol)
    return mults, pass_dims + 2 * plus, 2 * minus


def _commutant(classes: Classes) -> int:
    mults, plus, minus = classes
    return sum(2 * mu * mu * n for mu, n in mults.items()) + plus * plus + minus * minus


def _orthogonal_commutant(classes: Classes) -> int:
    mults, plus, minus = classes
    return sum(mu * mu * n for mu, n in mults.items()) + plus * (plus - 1) // 2 + minus * (minus - 1) // 2


def _gain_fiber(classes: Classes) -> int:
    mults, plus, minus = classes           # one exchange per plane (mu planes per class), per fixed dim
    return sum(mu * n for mu, n in mults.items()) + plus + minus


def rope_commutant_dim(frequencies: torch.Tensor | list[float], pass_dims: int) -> int:
    """dim of {A : A R(t) = R(t) A for all integer t}: sum over classes 2 mu^2 + nu_+^2 + nu_-^2.

    mu planes sharing one frequency form C^mu, whose commutant is GL(mu, C) (2 mu^2 real dims);
    a real eigenvalue of multiplicity nu contributes GL(nu) (nu^2 dims).
    """
    return _commutant(_classes(frequencies, pass_dims, ROTATION_TOL))


def orthogonal_commutant_dim(frequencies: torch.Tensor | list[float], pass_dims: int) -> int:
    """dim of the orthogonal matrices commuting with RoPE: sum mu^2 + nu_+(nu_+-1)/2 + nu_-(nu_- -1)/2.

    A class of mu planes with one frequency is C^mu: orthogonal and complex-linear is U(mu).
    """
    return _orthogonal_commutant(_classes(frequencies, pass_dims, ROTATION_TOL))


def gain_fiber(frequencies: torch.Tensor | list[float], pass_dims: int) -> int:
    """Unidentified dims of the shared gains (g_Q, g_K): the layer sees g_Q(i) g_K(j) R(t)_ij.

    Each dimension not mixed by any rotation (pass-through, or a plane with theta = 0 or pi mod
    2 pi) gives one exchange g_Q(i) -> c g_Q(i), g_K(i) -> g_K(i) / c; each rotating plane ties
    its two dimensions together and gives one.
    """
    return _gain_fiber(_classes(frequencies, pass_dims, ROTATION_TOL))


def layer_classes(config: AttentionConfig, frequencies: torch.Tensor | list[float] | None = None) -> Classes:
    """The rotation classes of the layer's RoPE (standard frequencies in closed form).

    Explicit ``frequencies`` must hold one angle per rotation plane (rotary_dim / 2).
    """
    r, k = config.rotary_dim, config.head_dim
    if frequencies is not None:
        try:
            n = len(frequencies)
        except TypeError:
            raise ConfigError(f"frequencies={frequencies!r} must be a sequence of numbers") from None
        if n != r // 2:
            raise ConfigError(f"frequencies: {n} given, but the layer has rotary_dim / 2 = {r // 2} "
                              "rotation planes (one frequency each)")
        return _classes(frequencies, k - r, ROTATION_TOL)
    if r // 2 <= CLOSED_FORM_PLANES or config.rope_base < 1.0:   # tabulate (angles above 1 wrap)
        if r // 2 > MAX_TABULATED_PLANES:
            raise ConfigError(f"rope_base={config.rope_base:g} < 1 with {r // 2} rotation planes: "
                              f"at most {MAX_TABULATED_PLANES} are counted")
        return _classes(rope_frequencies(config), k - r, ROTATION_TOL)
    mults, plus, minus = _standard_classes(r // 2, config.rope_base)
    return mults, plus + k - r, minus


# -- which layers have a derived count -----------------------------------------------------

def check_derived(config: AttentionConfig) -> None:
    """Refuse (ConfigError naming the rule) a valid layer whose count is not derived in the book.

    The formulas below assume: a rotary or normalised head no wider than what it reads (d_in, the
    latent C); a normalised latent 2 <= C <= d_in; stacks without centred inputs or v/o biases.
    """
    d_in, k, C = config.input_dim, config.head_dim, config.kv_latent
    if config.rotary_dim and k > config.d_model:
        raise ConfigError(
            f"head_dim={k} must be at most d_model={config.d_model} when rope_fraction > 0 "
            "(the count for a rotary head wider than the model is not derived)")
    if config.rotary_dim and config.input_centered and k > d_in:
        raise ConfigError(
            f"head_dim={k} must be at most d_model - 1 = {d_in} when rope_fraction > 0 and "
            "input_centered=True (the count is not derived)")
    if config.qk_norm.startswith("layernorm") and (config.n_layers > 1 or C is not None
                                                   or config.input_centered or k < 3
                                                   or not config.rotary_dim):
        raise ConfigError(
            f"qk_norm={config.qk_norm!r} is derived for one layer with RoPE, without latent or "
            f"centred inputs, and with head_dim >= 3 (got {k}; without RoPE the centred heads "
            "have more symmetry, not derived)")
    if config.qk_norm == "whole" and (config.n_layers > 1 or C is not None or config.input_centered
                                      or config.n_heads * k > d_in):
        raise ConfigError(
            f"qk_norm='whole' is derived for one layer without latent or centred inputs and with "
            f"n_heads * head_dim = {config.n_heads * k} at most d_model = {config.d_model}")
    if config.qk_norm != "none":
        if k < 2:
            raise ConfigError(f"qk_norm={config.qk_norm!r} needs head_dim >= 2 (a normalised "
                              "1-dim head is a sign; its count is not derived)")
        if k > d_in:
            raise ConfigError(
                f"qk_norm={config.qk_norm!r} needs head_dim={k} at most the input dimension {d_in} "
                f"(d_model{' - 1, input_centered' if config.input_centered else ''}); the count "
                "for a wider normalised head is not derived")
    if C is not None:
        if config.rotary_dim and k > C:
            raise ConfigError(
                f"head_dim={k} must be at most kv_latent={C} when rope_fraction > 0 "
                "(the count for a rotary head wider than the latent is not derived)")
        if config.qk_norm != "none" and k > C:
            raise ConfigError(
                f"qk_norm={config.qk_norm!r} needs head_dim={k} at most kv_latent={C} "
                "(the count for a normalised head wider than the latent is not derived)")
        if config.latent_norm and not (2 <= C <= d_in):
            raise ConfigError(
                f"latent_norm=True needs 2 <= kv_latent <= {d_in} (the input dimension; got "
                f"kv_latent={C}): the count for other latent widths is not derived")
    if config.softcap is not None and config.has_bias("k") and k > d_in:
        raise ConfigError(f"softcap with a key bias needs head_dim={k} at most the input dimension "
                          f"{d_in} (the count for a wider capped head is not derived)")
    if config.n_layers > 1:
        if config.input_centered:
            raise ConfigError("input_centered=True with n_layers > 1 is not derived (only the "
                              "first layer of a residual stack sees centred inputs)")
        if config.has_bias("v") or config.has_bias("o"):
            raise ConfigError(
                f"bias={config.bias!r} with n_layers > 1: value and output biases (letters v, o) "
                "shift the residual stream between layers; that count is not derived")


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


def count(config: AttentionConfig | LatentAttentionConfig,
          frequencies: torch.Tensor | list[float] | None = None) -> Count:
    """Total, identified and unidentified parameters of one layer (or stack), by component.

    ``frequencies``: RoPE angles per plane instead of the standard base^(-2i/r) (rotary_dim / 2
    of them).  A layer whose count is not derived is refused (``check_derived``).  A latent
    attention layer is counted by :func:`count_latent`.
    """
    if isinstance(config, LatentAttentionConfig):
        return count_latent(config, frequencies)
    check_derived(config)
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
    if frequencies is not None and not r:
        layer_classes(config, frequencies)          # a layer without RoPE: only [] fits
    classes = layer_classes(config, frequencies) if r else None

    gain_unid = 0
    if config.qk_norm != "none":      # k <= min(d_in, b) (check_derived refuses wider heads)
        ortho = 0
        if config.qk_norm == "plain":
            ortho = _orthogonal_commutant(classes) if classes else k * (k - 1) // 2
        else:
            gain_unid = _gain_fiber(classes) if classes else k
        # whole: one scale for all queries and one for all keys (counted once, below), no
        # rotation survives the gains; per head and group: m + 1 scales
        qk_fiber = 0 if config.qk_norm == "whole" else ortho + mm + 1
        q_bias_fiber, k_bias_fixed = 0, 0
        if config.qk_norm.startswith("layernorm"):
            # the mean is subtracted: each head's all-ones direction of W_Q, b_Q (W_K, b_K) is unseen
            qk_fiber += (mm + 1) * d_in
            q_bias_fiber, k_bias_fixed = mm, 1
    elif classes:  # k <= min(d_in, b) (check_derived refuses wider rotary heads)
        qk_fiber = _commutant(classes)
        q_bias_fiber = 0
        k_bias_fixed = classes[1]
    else:
        qk_fiber = factor_fiber(d_in, b, k, mm)
        q_bias_fiber = factor_fiber(a, b, k, mm) - qk_fiber
        k_bias_fixed = k
    if config.softcap is not None:   # capped scores see row constants: the key bias is identified
        k_bias_fixed = 0
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
                            R * G * (qk_fiber + extra * k) + qk_ones
                            + (2 if config.qk_norm == "whole" else 0)),
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
    if config.qk_norm == "layernorm":   # per-head gains: per group, its m heads against g_K
        comps.append(ComponentCount("g_QK", (H + G) * k, G * gain_unid))
    if config.qk_norm == "layernorm_shared":   # shared gain and shift: one exchange per class;
        comps.append(ComponentCount("g_QK", 2 * k, gain_unid))   # the key shift's fixed dims are
        nu = layer_classes(config, frequencies)[1] if r else k   # row constants
        comps.append(ComponentCount("c_QK", 2 * k, nu))
    if config.qk_norm == "whole":   # per group: g_Q of its m heads against g_K, one per class
        comps.append(ComponentCount("g_QK", (H + G) * k, G * gain_unid))
    return Count(config, tuple(comps))


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
