"""The formulas the counts are made of: fibers of factorisations and the RoPE rotation classes.

Plain functions of integers (and of RoPE angles); the variant rows (:mod:`idlib.variants`) combine
them into a layer's count and :mod:`idlib.counting` adds them up.  The derivations are in the
book (chapters 2-5 and 7).

Rotation classes: planes whose offset-1 rotations agree up to conjugation (within
ROTATION_TOL) form one class.  Explicit frequencies are sorted (O(P log P), P planes); the
standard ones base^(-2i/r) are grouped in closed form (``_standard_classes``, O(distinct class
sizes)), so any width the config accepts (up to 2**53) is counted at once.

Counting imports no torch (idlib.lazy): the classes are computed on Python floats (math's pow,
sin, cos and atan2; the angles of a tensor are read into floats).  Only ``rope_frequencies``, the
schedule as a tensor for the forward pass, uses torch; ``standard_frequencies`` is the same
schedule as floats, for the count (tests/test_fibers_without_torch.py: the classes are those
the former torch computation gave).
"""
from __future__ import annotations

import bisect
import math
import numbers
import operator
from collections import Counter
from itertools import compress, islice, repeat
from typing import Any

from .fields import ConfigError
from .lazy import is_tensor, torch

ROTATION_TOL = 1e-9             # two rotations are one class when |e^{i theta} - e^{i theta'}| < this
MAX_TABULATED_PLANES = 1 << 22  # frequencies tabulated and sorted (explicit, or a base below 1)
CLOSED_FORM_PLANES = 1 << 12    # standard frequencies beyond this many planes: classes in closed form
MAX_CLASS_SIZES = 20_000        # distinct class sizes the closed form walks through (standard RoPE)


def rope_frequencies(config) -> torch.Tensor:
    """theta_i = base^(-2i/r), i = 0 .. r/2 - 1 (the RoFormer / GPT-NeoX schedule), a float64
    tensor for the forward pass."""
    r = config.rotary_dim
    i = torch.arange(r // 2, dtype=torch.float64)
    return config.rope_base ** (-2.0 * i / r) if r else i


def standard_frequencies(config) -> list[float]:
    """The same schedule as floats, for counting (no torch): each angle is the same float64
    expression, base ** (-2.0 * i / r), rounded by the C library's pow instead of torch's (they
    may differ in the last bit; the classes differ only where an angle or the gap between two
    lies exactly on the tolerance, see tests/test_fibers.py).  An angle too large for a float
    is infinite (then refused as not finite)."""
    r, base = config.rotary_dim, config.rope_base
    exponents = list(map(operator.truediv, map(operator.mul, repeat(-2.0), range(r // 2)), repeat(r)))
    try:
        return list(map(math.pow, repeat(float(base)), exponents))
    except OverflowError:
        return [_power(base, e) for e in exponents]


def _power(base: float, exponent: float) -> float:
    try:
        return math.pow(base, exponent)
    except OverflowError:
        return math.inf


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


def _angles(frequencies: Any) -> list[float]:
    """The angles as floats, in order (nested sequences flattened, as torch.as_tensor(frequencies,
    dtype=float64).reshape(-1) would): a tensor, a NumPy array, a sequence of numbers."""
    if is_tensor(frequencies):
        return frequencies.detach().to(device="cpu", dtype=torch.float64).reshape(-1).tolist()
    if hasattr(frequencies, "tolist"):                  # NumPy arrays and scalars
        frequencies = frequencies.tolist()
    if isinstance(frequencies, numbers.Real):
        return [float(frequencies)]
    if isinstance(frequencies, (str, bytes)) or not hasattr(frequencies, "__iter__"):
        raise ConfigError("frequencies must be finite real numbers")
    out: list[float] = []
    for f in frequencies:
        if type(f) is float:
            out.append(f)
        else:
            out.extend(_angles(f))
    return out


def _group(frequencies: Any, tol: float) -> tuple[list[int], int, int]:
    """(multiplicities in order of first appearance, planes at +1, planes at -1): sort, O(P log P).

    Plain Python floats (the math module's sin, cos, atan2), no tensor: counting imports no torch.
    """
    theta = _angles(frequencies)
    if not all(map(math.isfinite, theta)):
        raise ConfigError("frequencies must be finite numbers")
    # (map and compress: the same float operations as a loop would do, at C speed)
    phi = list(map(math.atan2, map(abs, map(math.sin, theta)), map(math.cos, theta)))  # [0, pi]
    delta = _delta(tol)
    at_plus = list(map(delta.__gt__, phi))                              # phi < delta
    at_minus = list(map(delta.__gt__, map(operator.sub, repeat(math.pi), phi)))   # pi - phi < delta
    plus, minus = sum(at_plus), sum(at_minus)
    rotating = list(map(operator.not_, map(operator.or_, at_plus, at_minus)))
    rest = list(compress(range(len(phi)), rotating))
    order = sorted(rest, key=phi.__getitem__, reverse=True)      # descending, ties in order
    vals = list(map(phi.__getitem__, order))
    n = len(vals)                                       # runs joined by gaps < delta ...
    gaps = map(operator.sub, vals, islice(vals, 1, None))
    starts = [0] + list(compress(range(1, n), map(delta.__le__, gaps)))      # gap >= delta
    if len(starts) >= n:                                # every plane a class of its own
        return [1] * n, plus, minus
    size_at = list(map(int, rotating))                  # class size at the class's first plane
    ends = starts[1:] + [n]                             # (1: a class of its own, so far)
    longer = map(operator.lt, map(operator.add, starts, repeat(1)), ends)   # runs of 2 or more
    for start, end in compress(zip(starts, ends), longer):
        # ... split at DELTA from their head (vals sorted by -phi; a plane no split reaches, -1,
        # stays in the run's own class)
        label, c, i = [-1] * (end - start), 0, start
        while i < end:
            j = min(end, bisect.bisect_left(vals, -vals[i] + delta, start, end, key=operator.neg))
            label[i - start:j - start] = [c] * max(0, j - i)
            i, c = max(j, i + 1), c + 1
        first: dict[int, int] = {}
        for plane, lab in zip(order[start:end], label):
            size_at[plane] = 0
            if first.get(lab, plane) >= plane:
                first[lab] = plane
        for lab, size in Counter(label).items():
            size_at[first[lab]] = size
    return list(filter(None, size_at)), plus, minus


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


def _classes(frequencies: Any, pass_dims: int, tol: float) -> Classes:
    mults, plus, minus = _group(frequencies, tol)
    return Counter(dict(sorted(Counter(mults).items()))), pass_dims + 2 * plus, 2 * minus


def rotation_classes(frequencies: Any, pass_dims: int,
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


def rope_commutant_dim(frequencies: Any, pass_dims: int) -> int:
    """dim of {A : A R(t) = R(t) A for all integer t}: sum over classes 2 mu^2 + nu_+^2 + nu_-^2.

    mu planes sharing one frequency form C^mu, whose commutant is GL(mu, C) (2 mu^2 real dims);
    a real eigenvalue of multiplicity nu contributes GL(nu) (nu^2 dims).
    """
    return _commutant(_classes(frequencies, pass_dims, ROTATION_TOL))


def orthogonal_commutant_dim(frequencies: Any, pass_dims: int) -> int:
    """dim of the orthogonal matrices commuting with RoPE: sum mu^2 + nu_+(nu_+-1)/2 + nu_-(nu_- -1)/2.

    A class of mu planes with one frequency is C^mu: orthogonal and complex-linear is U(mu).
    """
    return _orthogonal_commutant(_classes(frequencies, pass_dims, ROTATION_TOL))


def gain_fiber(frequencies: Any, pass_dims: int) -> int:
    """Unidentified dims of the shared gains (g_Q, g_K): the layer sees g_Q(i) g_K(j) R(t)_ij.

    Each dimension not mixed by any rotation (pass-through, or a plane with theta = 0 or pi mod
    2 pi) gives one exchange g_Q(i) -> c g_Q(i), g_K(i) -> g_K(i) / c; each rotating plane ties
    its two dimensions together and gives one.
    """
    return _gain_fiber(_classes(frequencies, pass_dims, ROTATION_TOL))


def layer_classes(config: AttentionConfig, frequencies: Any | None = None) -> Classes:
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
        return _classes(standard_frequencies(config), k - r, ROTATION_TOL)
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
