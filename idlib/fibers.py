"""The formulas the counts are made of: fibers of factorisations and the RoPE rotation classes.

Plain functions of integers (and of RoPE angles); the variant rows (:mod:`idlib.variants`) combine
them into a layer's count and :mod:`idlib.counting` adds them up.  The derivations are in the
book (chapters 2-5 and 7).

Rotation classes: planes whose offset-1 rotations agree up to conjugation (within
ROTATION_TOL) form one class.  Explicit frequencies are sorted (O(P log P), P planes); the
standard ones base^(-2i/r) are grouped in closed form (``_standard_classes``, O(distinct class
sizes)), so any width the config accepts (up to 2**53) is counted at once.
"""
from __future__ import annotations

import math
from collections import Counter

import torch

from .fields import ConfigError

DTYPE = torch.float64
ROTATION_TOL = 1e-9             # two rotations are one class when |e^{i theta} - e^{i theta'}| < this
MAX_TABULATED_PLANES = 1 << 22  # frequencies held as a tensor (explicit, or a base below 1)
CLOSED_FORM_PLANES = 1 << 12    # standard frequencies beyond this many planes: classes in closed form
MAX_CLASS_SIZES = 20_000        # distinct class sizes the closed form walks through (standard RoPE)


def rope_frequencies(config) -> torch.Tensor:
    """theta_i = base^(-2i/r), i = 0 .. r/2 - 1 (the RoFormer / GPT-NeoX schedule)."""
    r = config.rotary_dim
    i = torch.arange(r // 2, dtype=DTYPE)
    return config.rope_base ** (-2.0 * i / r) if r else i


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


def _group(frequencies: torch.Tensor | list[float], tol: float) -> tuple[torch.Tensor, int, int]:
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
            asc = (-vals).contiguous()                      # (only the runs of two or more: a
            split, c = label.clone(), int(runs.numel())     # Python loop over their classes)
            for start in (new & (runs[label] > 1)).nonzero().reshape(-1).tolist():
                i, end = start, start + int(runs[label[start]])
                while i < end:
                    j = min(end, int(torch.searchsorted(asc, asc[i] + delta, side="left")))
                    split[i:j] = c
                    i, c = max(j, i + 1), c + 1
            label = torch.unique(split, return_inverse=True)[1]
    first = torch.full((int(label.max()) + 1 if n else 0,), len(phi), dtype=torch.long)
    first = first.scatter_reduce(0, label, rest[order], reduce="amin") if n else first
    mults = torch.bincount(label, minlength=first.numel()) if n else torch.zeros(0, dtype=torch.long)
    return mults[torch.argsort(first, stable=True)], int(plus.sum()), int(minus.sum())


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
    sizes, n = torch.unique(mults, return_counts=True)
    return Counter(dict(zip(sizes.tolist(), n.tolist()))), pass_dims + 2 * plus, 2 * minus


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
    return mults.tolist(), pass_dims + 2 * plus, 2 * minus


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
