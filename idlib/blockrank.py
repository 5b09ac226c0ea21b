r"""A certified lower bound on the Jacobian rank by structure, at a point chosen to make J easy.

**Why a chosen point is enough.**  The rank of J(theta, X) at *any* parameters theta and inputs
X is at most its generic rank (the set where the rank is maximal is open and dense: the appendix's
thm-sweep-one-point), and the symmetry of chapters 1 to 5 gives rank J <= P - U at every point
(U the closed form, :func:`idlib.counting.count`).  So one point where rank J >= P - U is certified
proves that the generic rank is P - U, and nothing obliges that point to be random.  This route
chooses it so that J is block lower-triangular with small diagonal blocks, and certifies the rank
of each block on its own:

    rank J  >=  sum_b rank E_b,       E_b = J[rows R_b, columns C_b],  J[R_b, C_c] = 0 for c > b,

(the rank of a block lower-triangular matrix is at least the sum of the ranks of its diagonal
blocks).  If the sum reaches P - U, the rank is P - U; if it does not, the route says "not
certified" (it never reports a rank it has only bounded).

**The point.**  (Coordinates a = 1..d of the input; W_O stacked over heads is H v x d.)

* W_Q, W_K, b_Q, b_K: the given (generic, seeded) values.
* W_V^g = [I_v; 0] (every key/value group reads the first v input coordinates as its values) and
  b_V = 0, so head h's output is Z^h = A^h X[:, 1..v].
* W_O^h = E_h^T (head h writes its v outputs to coordinates h v + 1 .. h v + v; the stacked W_O is
  [I_{Hv}, 0]) and b_O = 0.  Any W_O of full row rank is [I, 0] M for an invertible M, and
  W_O -> W_O M is a change of the output basis, which leaves the rank unchanged.  With this W_O
  the outputs of group g's heads depend on group g's parameters only.

**The rows and columns.**  A parameter "belongs to" coordinate a when its derivative is
proportional to x[a] of some token: row a of W_Q^h, W_K^g, W_V^g, and row (h', a) of W_O
(d Z^{h'}_t[a] / d theta is A^{h'} X[:, a]: with W_V = [I; 0] the value coordinate a *is* the input
coordinate a).  b_Q, b_K belong to the first coordinate stage (they are invisible while every
token is zero: all values are then equal), b_V and b_O to a stage of their own with zero tokens.
Stage b feeds sequences whose tokens are supported on coordinates 1..hi_b: the derivatives of
every later coordinate's parameters vanish on them *exactly* (a factor x[a] = 0), which is the
triangular structure.  Stages: the zero-token stage (with value or output biases), then the first
c_0 coordinates together, then one stage per coordinate.  c_0 = 4 with one head per group and no
RoPE (head outputs of one-dimensional tokens are nearly dependent functions; four coordinates
make them well conditioned).  c_0 = k with m = H/G > 1 heads per group: a stage of one coordinate
sees 2 m a - m products of W_Q^h W_K^T for (m + 1) k parameters, too few below a = k, while the
merged stage is exactly the layer restricted to k inputs, whose unidentified count is the whole
layer's.  c_0 = k with RoPE too: one coordinate a then sees wq_a R_delta wk_b, whose slow planes
(cos(delta theta) ~ 1) are nearly alike, and the bound lost a few directions (measured at d = 256,
H = 16: 18 instead of the commutant's 16 at a = 1); the merged stage sees the commutant exactly.
With RoPE the sequences are at least min(``ROPE_SEQ_LEN`` = 64, d + 2) tokens long (offsets that
turn the slow planes measurably).

**A diagonal block.**  In stage b, for key/value group g, the rows are (output (h, c) of a head h
of the group, token t) and the columns are the stage's parameters of the group, plus the W_O
entries W_O[(h', c'), j] with c' in the stage and j one of the group's outputs:

    E_{b,g} = [ I_{m v} (x) Y_b ,  K_{b,g} ],   Y_b = [Z^{h'}[:, c'] ... (, 1 for b_O)]   (N x n_y),

K_{b,g} in closed form (``group_block``; the Khatri-Rao formulas of :mod:`idlib.fastrank`
restricted to the stage's rows and columns: d Z_t / d W_Q^h[a, e] = x_t[a] (R_t^T C_t)[e, :] /
sqrt(k) with C_t = sum_s A_ts k_s (v_s - Z_t)^T, d Z_t[c] / d W_K[a, e] = sum_s A_ts (v_s -
Z_t)[c] x_s[a] (R_s^T q_t)[e] / sqrt(k), d Z_t[c] / d W_V[a, f] = (A X)_t[a] delta_cf).  The
outputs h v + c >= H v (when H v < d) see only W_O and b_O: the block I (x) Y_b.  The tests check
every block against ``torch.func`` on small layers, and ``block_rank`` checks each run against the
layer's own forward pass, every variant hook included (``check_stage``: one backward pass per
checked stage, ``CHECKED_STAGES`` of them; the later coordinates' derivatives must vanish exactly,
the stage's must be the blocks'; a BlockError otherwise).

**The certificate of one block** (``certify_block``; rigorous for the computed block, then Weyl for
the exact one):

1. Columns are scaled by powers of two (exact) so that the *absolute* version F of each column
   (every factor of the closed form replaced by its absolute value) has norm in [1/2, 1).
2. A subset S of the columns is chosen (numerically, no rigour needed): all of them if the Gram
   matrix of the part orthogonal to I (x) Y passes a Cholesky test at ``SELECT_CUT``^2, else by
   pivoted Cholesky (greedy; the dropped columns are the block's share of the symmetry).
3. Cholesky test: [[I (x) G_Y, B], [B^T, G_K]] - mu' I, G_Y = Y^T Y, B_j = Y^T K_j, G_K = K_S^T K_S,
   factored by blocks (Cholesky of G_Y - mu' I, a triangular solve, the Schur complement of
   order |S|).  Passing means the computed Gram matrix minus mu' I plus the factorisation's
   backward error is positive definite.  With u = eps / 2, gamma_n = n u / (1 - n u) and Frobenius
   norms of the scaled Y and K_S, forming the Gram matrix errs by at most
   gamma_N (||Y||^2 + ||Y|| ||K||) + gamma_{m v N} ||K||^2 and the factorisation by at most
   gamma_{n_y+1} ||Y||^2 + gamma_{n_y} ||Y|| ||K|| + gamma_{m v n_y + |S| + 1} ||K||^2 (Higham,
   Thm 10.3, entry by entry with its own number of terms); mu' = mu + delta (delta twice their
   sum, ``gram_error``) so that sigma_min(computed E_S) >= sqrt(mu), mu searched from half the
   smaller least eigenvalue of G_Y and of the projected Gram matrix, down by factors of 4.
4. Rounding in the block's *entries*: with e_E a first-order bound on the relative error of the
   closed form (projections and rotations gamma_{a+9}, scores, the softmax's sensitivity
   2 e_S max|S| plus its own rounding, the sums over keys; times ``ROUNDING_SAFETY`` = 4, library
   exp/sin/cos within 2 ulp), |computed - exact| <= e_E F entry by entry, so the exact block's
   sigma_{|S|} >= sqrt(mu) - e_E ||F D||_F (Weyl).

The block's gap is sqrt(mu) / max(e_E ||F D||_F, tau_b), tau_b = sqrt(||Y||_F^2 + ||K_S||_F^2 +
delta) max(rows, columns) eps >= the book's round-off tolerance of the scaled block (the
Frobenius norms bound ||E_b D||_2 from above): the ratio the dense route certifies,
certified here for each diagonal block (a lower bound on the block's sigma_r over an upper bound
on its round-off; sigma_{r+1} of a block is exactly 0 once the ranks sum to P - U).  The route's
gap is the smallest block gap, certified when >= 1e4 *and* the ranks sum to P - U.  It is not
a bound on J's own sigma_r (the triangle carries rank, not singular values).

**Cost** (float64; N tokens per stage, c = (m + 1) k + v columns of K per group and coordinate,
m = H / G).  Per single-coordinate stage: the attention terms, ~ 2 H N n (k + v) flops for the
key/value covariances C_t and, with RoPE, H N n v k for the key columns (n tokens per sequence);
the blocks and their absolute versions, 2 x H v N c entries; per group the Gram matrix of K_S,
2 m v N c^2 flops (twice at the stages a <= v, where the part orthogonal to I (x) Y is formed for
the selection), and a Cholesky factorisation c^3 / 3 (a few, if mu must come down).  With
m = 1, k = v, H v = d and N ~ 2 k that is ~ 36 d k^3 per stage and ~ 36 d^2 k^3 for the layer:
6 x 10^12 flops at GPT-2 small (d = 768, k = 64), against ~ 4 B n d P^2 ~ 10^19 for the dense
SVD of its Jacobian.  The merged first stage has c_0 c columns per group (plus H c_0 columns of
Y, times m v outputs) and N ~ 1.5 (H c_0 + c_0 c / (m v)) tokens: with m > 1 or RoPE (c_0 = k)
it is the largest block, ~ 2 m v N (k c)^2 flops per group.  Memory: one stage at a time, a
chunk of groups (``group_chunk``, ~ ``BLOCK_BYTES`` of K) whose K, absolute version, scaled
copies and projection take 5 x 8 m v N c_0 c bytes per group, plus the stage's attention terms
(``estimated_bytes``: ~0.7 GB at d = 256, H = 16, ~2.3 GB with 4 key/value groups, ~2.2 GB at
GPT-2's shape).  J itself (8 d^2 N bytes per stage) is never formed.

**When it fails.**  It applies only to layers whose every variant row declares the "block"
capability (plain heads, key/value groups, RoPE, biases, causal masks) with k, v <= d and
H v <= d (``applicable``).  A block can come out ill-conditioned (tokens too few or too similar;
then its gap is small) or rank-deficient at this point (then the ranks sum below P - U): the
route then reports "not certified" with that sum as ``rank``, and ``idlib.rank.measure`` falls
back to the other routes where they run.  A certified sum above P - U would contradict the
closed form's symmetry; it is reported, also as not certified (J's rank is then only bounded).
"""
from __future__ import annotations

import math
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from .lazy import torch

from . import variants
from .attention import (Params, apply_rope, attention_weights, flatten, forward, init_params,
                        n_params, param_shapes, project, rope_frequencies, unflatten)
from .certify import is_certified
from .config import AttentionConfig
from .counting import count

__all__ = ["BlockRank", "BlockCertificate", "Stage", "applicable", "block_point", "stages",
           "stage_inputs", "group_block", "certify_block", "block_rank"]

FIRST_COORDINATES = 4    # m = 1 without RoPE: the first 4 input coordinates form one stage
ROPE_SEQ_LEN = 64        # with RoPE, sequences of at least 64 tokens (offsets that resolve slow planes)
TOKEN_SCALE = 1.0        # tokens of stage b: entries N(0, d / hi_b) on coordinates 1..hi_b (scores O(1))
TOKEN_MARGIN = 1.5       # tokens per stage: 1.5 x (Y's columns + the block's columns per output)
SELECT_CUT = 1e-6        # scaled singular values below this are dropped by the column selection
ROUNDING_SAFETY = 4.0    # factor on the first-order bound of the entries' rounding
CERTIFY_TRIES = 10       # Cholesky tests per block, mu lowered by 4 each time
CHECKED_STAGES = 6       # stages checked against the layer's forward pass per run (JVPs)
EPS = sys.float_info.epsilon  # float64's machine epsilon, torch.finfo(torch.float64).eps
U = EPS / 2              # unit round-off of float64


class BlockError(ValueError):
    """The layer lacks the structure the block route needs (one line naming the rule)."""


def applicable(config: AttentionConfig) -> str | None:
    """None if the block route applies to this layer, else the rule it breaks (one line).

    An allow-list: every variant row the layer uses must declare the "block" capability; and
    k <= d, v <= d, H v <= d (the point needs W_V = [I_v; 0] and a W_O of full row rank).
    """
    missing = variants.unsupported(config, "block")
    if missing:
        return (f"variant(s) {variants.named(missing)}: no block structure declared (the block "
                "route takes a layer only when every variant in it declares it)")
    d, H, k, v = config.d_model, config.n_heads, config.head_dim, config.value_dim
    if k > d or v > d:
        return f"head_dim={k} and value_dim={v} must be at most d_model={d}"
    if H * v > d:
        return f"n_heads * value_dim = {H * v} must be at most d_model = {d} (W_O of full row rank)"
    return None


def block_point(config: AttentionConfig, params: Params, device: torch.device | None = None) -> Params:
    """The route's point: W_Q, W_K, b_Q, b_K from ``params``; W_V^g = [I_v; 0], b_V = 0;
    W_O^h = E_h^T (head h writes outputs h v .. h v + v - 1), b_O = 0 (module docstring)."""
    d, H, G, v = config.d_model, config.n_heads, config.n_kv_heads, config.value_dim
    p = {name: t.detach().to(device=device, dtype=torch.float64) for name, t in params.items()}
    eye = torch.eye(v, dtype=torch.float64, device=device)
    p["W_V"] = torch.zeros(G, d, v, dtype=torch.float64, device=device)
    p["W_V"][:, :v] = eye
    p["W_O"] = torch.zeros(H, v, d, dtype=torch.float64, device=device)
    for h in range(H):
        p["W_O"][h, :, h * v:(h + 1) * v] = eye
    for name in ("b_V", "b_O"):
        if name in p:
            p[name] = torch.zeros_like(p[name])
    return p


@dataclass(frozen=True)
class Stage:
    """Coordinates lo + 1 .. hi (0-based: lo .. hi - 1) and the tokens that see them.

    ``hi`` = 0: the zero-token stage of b_V and b_O.  ``qk_biases``: b_Q, b_K are in this stage.
    Tokens: ``n_sequences`` sequences of ``seq_len`` tokens supported on coordinates 1..hi.
    """

    lo: int
    hi: int
    qk_biases: bool
    n_sequences: int
    seq_len: int

    @property
    def coordinates(self) -> range:
        return range(self.lo, self.hi)

    @property
    def n_tokens(self) -> int:
        return self.n_sequences * self.seq_len


def _y_columns(config: AttentionConfig, lo: int, hi: int) -> int:
    """Columns of Y in a stage: the W_O rows (h', c) with c in the stage (c < v), and b_O."""
    rows = config.n_heads * max(0, min(hi, config.value_dim) - lo)
    return rows + (1 if hi == 0 and config.has_bias("o") else 0)


def _group_columns(config: AttentionConfig, lo: int, hi: int, qk_biases: bool) -> int:
    """Columns of K_{b,g}: W_Q^h (m heads), W_K, W_V rows of the stage's coordinates, biases."""
    m, k, v, a = config.group_size, config.head_dim, config.value_dim, hi - lo
    n = (m + 1) * k * a + v * a
    if qk_biases:
        n += m * k * config.has_bias("q") + k * config.has_bias("k")
    if hi == 0:
        n += v * config.has_bias("v")
    return n


def stages(config: AttentionConfig) -> list[Stage]:
    """The stages in order (module docstring): zero tokens (with b_V or b_O), the first c_0
    coordinates (c_0 = min(d, 4) for m = 1 without RoPE, k for m > 1 or with RoPE), then one
    coordinate each.

    Tokens per stage: N = max(2 k + 4, 1.5 (n_y + columns / (m v))) (keys must span R^k, and each
    output's N token rows must hold Y's n_y columns and its share of the block's), in sequences
    of k + 2 tokens (at least 4; with RoPE at least min(``ROPE_SEQ_LEN``, d + 2))."""
    d, k, m, v = config.d_model, config.head_dim, config.group_size, config.value_dim
    rotary = config.rotary_dim > 0
    seq_len = max(4, k + 2, min(ROPE_SEQ_LEN, d + 2) if rotary else 0)
    first = min(d, k if m > 1 or rotary else FIRST_COORDINATES)
    ranges = [(0, first)] + [(a, a + 1) for a in range(first, d)]
    out = []
    if config.has_bias("v") or config.has_bias("o"):
        out.append(Stage(0, 0, False, 1, 2))
    for lo, hi in ranges:
        qk = lo == 0
        need = TOKEN_MARGIN * (_y_columns(config, lo, hi)
                               + _group_columns(config, lo, hi, qk) / (m * v))
        n_tokens = max(2 * k + 4, math.ceil(need))
        out.append(Stage(lo, hi, qk, math.ceil(n_tokens / seq_len), seq_len))
    return out


def stage_inputs(config: AttentionConfig, stage: Stage, seed: int = 0,
                 device: torch.device | None = None) -> torch.Tensor:
    """Tokens (n_sequences, seq_len, d) with entries N(0, (TOKEN_SCALE sqrt(d / hi))^2) on the
    coordinates 1..hi and exact zeros elsewhere (seeded by (seed, hi); drawn on the CPU)."""
    d = config.d_model
    X = torch.zeros(stage.n_sequences, stage.seq_len, d, dtype=torch.float64)
    if stage.hi:
        gen = torch.Generator().manual_seed(1_000_003 * seed + stage.hi)
        scale = TOKEN_SCALE * math.sqrt(d / stage.hi)
        X[:, :, :stage.hi] = scale * torch.randn(stage.n_sequences, stage.seq_len, stage.hi,
                                                 generator=gen, dtype=torch.float64)
    return X.to(device)


def _abs_rope(x: torch.Tensor, frequencies: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """|R| x for x >= 0: the rotation's entries replaced by their absolute values (the absolute
    version of ``apply_rope``; the same for R and R^T)."""
    half = frequencies.shape[0]
    if half == 0:
        return x
    angle = positions.to(device=x.device, dtype=torch.float64)[:, None] * frequencies.to(x.device)[None, :]
    cos, sin = angle.cos().abs(), angle.sin().abs()
    x1, x2, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
    return torch.cat([x1 * cos + x2 * sin, x1 * sin + x2 * cos, rest], dim=-1)


@dataclass
class StageTerms:
    """What one stage's blocks are made of, for all heads, and their absolute versions (``*_abs``).

    q (B, H, n, k) rotated queries; A (B, H, n, n); AD = A_ts (v_s - Z_t) (B, H, t, s, v);
    RC = R_t^T C_t / sqrt(k) (B, H, t, v, k); Rq = R_s^T q_t / sqrt(k) (B, H, t, s, k) (RoPE only);
    AX = A X[:, :, coordinates of the stage] (B, H, n, a); Z (B, H, n, v); e_E the relative error
    bound of the entries (module docstring, step 4)."""

    X: torch.Tensor
    q: torch.Tensor
    A: torch.Tensor
    Z: torch.Tensor
    AD: torch.Tensor
    RC: torch.Tensor
    Rq: torch.Tensor | None
    AX: torch.Tensor
    q_abs: torch.Tensor
    Z_abs: torch.Tensor
    AD_abs: torch.Tensor
    RC_abs: torch.Tensor
    Rq_abs: torch.Tensor | None
    AX_abs: torch.Tensor
    e_E: float


def gamma(n: float) -> float:
    """gamma_n = n u / (1 - n u): the relative error bound of n floating-point operations."""
    return n * U / (1 - n * U)


def entry_rounding(config: AttentionConfig, stage: Stage, q: torch.Tensor, k: torch.Tensor,
                   q_abs: torch.Tensor, k_abs: torch.Tensor) -> float:
    """e_E: |computed entry - exact entry| <= e_E x (its absolute version), for every entry of the
    stage's blocks (first order in u, times ``ROUNDING_SAFETY``).

    Queries and keys (projection of hi + 1 terms, then the rotation): |dq| <= e_q q_abs with
    e_q = gamma_{hi+9}.  Scores: |dS| <= [gamma_{k+3} |q| |k| + e_q (q_abs |k| + |q| k_abs)] / sqrt(k).
    Softmax: relative error e_A = 2 max|dS| + u max|S - row max| + gamma_{n+4} (the exact softmax of
    the computed scores, then exp within 2 ulp, the sum, the division).  Head outputs Z = A v (v
    exact at this point): gamma_n + e_A; v - Z: u + that.  An entry sums n products of A, v - Z,
    x and a rotated query, key or covariance: gamma_{n+8} + e_A + e_{v-Z} + e_q.
    """
    kd, n = config.head_dim, q.shape[2]
    e_q = gamma(stage.hi + 9)
    qm, km = q.abs(), k.abs()
    dS = (gamma(kd + 3) * torch.einsum("bhtk,bhsk->bhts", qm, km)
          + e_q * (torch.einsum("bhtk,bhsk->bhts", q_abs, km)
                   + torch.einsum("bhtk,bhsk->bhts", qm, k_abs))) / math.sqrt(kd)
    S = torch.einsum("bhtk,bhsk->bhts", q, k) / math.sqrt(kd)
    e_A = 2.0001 * dS.max().item() + 2.0001 * U * S.abs().max().item() * 2 + gamma(n + 4)
    e_D = U + gamma(n) + e_A
    return ROUNDING_SAFETY * (gamma(n + 8) + e_A + e_D + e_q + gamma(8))


def stage_terms(config: AttentionConfig, p: Params, X: torch.Tensor, stage: Stage,
                frequencies: torch.Tensor | None = None) -> StageTerms:
    """The attention terms of one stage (``StageTerms``), from the layer's own projection and
    attention weights, with their absolute versions and the rounding bound e_E."""
    k = config.head_dim
    B, n, _ = X.shape
    q, kk, vv = project(config, p, X, frequencies)                    # (B, H, n, k|v), after RoPE
    A = attention_weights(config, q, kk)
    Z = A @ vv
    dev = X.device
    freqs = (rope_frequencies(config) if frequencies is None else frequencies).to(dev)
    pos = torch.arange(n, device=dev)
    rot = config.rotary_dim > 0
    scale = 1.0 / math.sqrt(k)
    cols = list(stage.coordinates)
    Xa = X[:, :, cols]
    # absolute versions: |x| |W| + |b|, then |R|
    Xabs = X.abs()
    qa = torch.einsum("bnd,hdk->bhnk", Xabs, p["W_Q"].abs())
    ka = torch.einsum("bnd,gdk->bgnk", Xabs, p["W_K"].abs())
    if "b_Q" in p:
        qa = qa + p["b_Q"].abs()[None, :, None, :]
    if "b_K" in p:
        ka = ka + p["b_K"].abs()[None, :, None, :]
    ka = ka.repeat_interleave(config.group_size, dim=1)
    if rot:
        qa, ka = _abs_rope(qa, freqs, pos), _abs_rope(ka, freqs, pos)
    va = vv.abs()                                                     # v = x[:v] exactly
    Za = A @ va
    D = vv[:, :, None, :, :] - Z[:, :, :, None, :]                   # (B, H, t, s, v)
    Da = va[:, :, None, :, :] + Za[:, :, :, None, :]
    AD, ADa = A[..., None] * D, A[..., None] * Da
    C = torch.einsum("bhtsc,bhse->bhtce", AD, kk) * scale            # (B, H, t, v, k)
    Ca = torch.einsum("bhtsc,bhse->bhtce", ADa, ka) * scale
    RC = apply_rope(C.transpose(2, 3), freqs, -pos).transpose(2, 3) if rot else C
    RCa = _abs_rope(Ca.transpose(2, 3), freqs, pos).transpose(2, 3) if rot else Ca
    Rq = Rqa = None
    if rot:     # R_s^T q_t for every key s: q_t rotated back to position s
        Rq = apply_rope(q[:, :, :, None, :].expand(B, -1, n, n, k), freqs, -pos) * scale
        Rqa = _abs_rope(qa[:, :, :, None, :].expand(B, -1, n, n, k), freqs, pos) * scale
    AX, AXa = A @ Xa[:, None], A @ Xa.abs()[:, None]
    e_E = entry_rounding(config, stage, q, kk, qa, ka)
    return StageTerms(X=X, q=q, A=A, Z=Z, AD=AD, RC=RC, Rq=Rq, AX=AX, q_abs=qa, Z_abs=Za,
                      AD_abs=ADa, RC_abs=RCa, Rq_abs=Rqa, AX_abs=AXa, e_E=e_E)


def y_block(config: AttentionConfig, terms: StageTerms, stage: Stage) -> tuple[torch.Tensor, torch.Tensor]:
    """(Y, |Y|'s absolute version), N x n_y: Z^{h'}[:, c] for the W_O rows (h', c) of the stage
    (c-major, then h'), then the ones column of b_O (in the zero-token stage)."""
    v = config.value_dim
    N = terms.X.shape[0] * terms.X.shape[1]
    cs = [c for c in stage.coordinates if c < v]
    ys = [terms.Z[:, :, :, cs].permute(0, 2, 3, 1).reshape(N, -1)]
    ya = [terms.Z_abs[:, :, :, cs].permute(0, 2, 3, 1).reshape(N, -1)]
    if stage.hi == 0 and config.has_bias("o"):
        ones = torch.ones(N, 1, dtype=torch.float64, device=terms.X.device)
        ys.append(ones)
        ya.append(ones)
    return torch.cat(ys, 1), torch.cat(ya, 1)


def y_parameters(config: AttentionConfig, stage: Stage) -> list[tuple[str, tuple[int, ...]]]:
    """The parameters behind Y's columns, each with every output j: ("W_O", (h', c)) or ("b_O", ())."""
    cs = [c for c in stage.coordinates if c < config.value_dim]
    out = [("W_O", (h, c)) for c in cs for h in range(config.n_heads)]
    if stage.hi == 0 and config.has_bias("o"):
        out.append(("b_O", ()))
    return out


def stage_blocks(config: AttentionConfig, terms: StageTerms, stage: Stage, groups: range,
                 absolute: bool = False, row_order: bool = True) -> torch.Tensor:
    """K_{b,g} for the key/value groups ``groups``, shape (len(groups), m v, N, c): rows (output
    (h, c) of the group's heads, token), columns in the order of ``group_parameters``;
    ``absolute``: the absolute version F instead (module docstring).  ``row_order=False``: the
    same rows in the order they are made, (head, token, output) (no copy), for the uses that do
    not depend on the order of the rows (Gram matrices and column norms, without Y)."""
    m, k, v = config.group_size, config.head_dim, config.value_dim
    B, n = terms.X.shape[:2]
    N, Gs = B * n, len(groups)
    heads = slice(groups.start * m, groups.stop * m)
    T = {"RC": terms.RC_abs if absolute else terms.RC, "AD": terms.AD_abs if absolute else terms.AD,
         "Rq": terms.Rq_abs if absolute else terms.Rq, "AX": terms.AX_abs if absolute else terms.AX,
         "q": terms.q_abs if absolute else terms.q}
    T = {key: None if t is None else t[:, heads] for key, t in T.items()}
    X = terms.X.abs() if absolute else terms.X
    Xa = X[:, :, list(stage.coordinates)]
    dev = X.device
    ones = torch.ones(B, n, 1, dtype=torch.float64, device=dev)
    eye_v = torch.eye(v, dtype=torch.float64, device=dev)

    def by_group(t: torch.Tensor) -> torch.Tensor:       # (B, H', n, v, w) -> (G', m, N, v, w)
        w = t.shape[-1]
        return t.reshape(B, Gs, m, n, v, w).permute(1, 2, 0, 3, 4, 5).reshape(Gs, m, N, v, w)

    def query_columns(w: torch.Tensor) -> torch.Tensor:   # each head's own columns, (G', m, N, v, m w')
        cols = by_group(torch.einsum("bta,bhtce->bhtcae", w, T["RC"]).flatten(-2))
        out = torch.zeros(Gs, m, N, v, m, cols.shape[-1], dtype=torch.float64, device=dev)
        for hl in range(m):
            out[:, hl, :, :, hl] = cols[:, hl]
        return out.flatten(-2)

    def key_columns(w: torch.Tensor) -> torch.Tensor:     # the group's key, in every head's rows
        if T["Rq"] is not None:
            cols = torch.einsum("bhtsc,bsa,bhtse->bhtcae", T["AD"], w, T["Rq"])
        else:
            s = torch.einsum("bhtsc,bsa->bhtca", T["AD"], w)
            cols = s[..., None] * T["q"][:, :, :, None, None, :] / math.sqrt(k)
        return by_group(cols.flatten(-2))

    parts = []
    names = {name for name, _ in group_parameters(config, stage)}
    if "W_Q" in names or "b_Q" in names:          # W_Q^h rows (a, e) then b_Q^h, head by head
        q_cols = [query_columns(w) for w, name in ((Xa, "W_Q"), (ones, "b_Q")) if name in names]
        if len(q_cols) == 2:                      # interleave per head: [W_Q^h, b_Q^h] for each h
            a_k = Xa.shape[-1] * k
            wq = q_cols[0].reshape(Gs, m, N, v, m, a_k)
            bq = q_cols[1].reshape(Gs, m, N, v, m, k)
            q_cols = [torch.cat([wq, bq], -1).flatten(-2)]
        parts += q_cols
    if "W_K" in names:
        parts.append(key_columns(Xa))
    if "b_K" in names:
        parts.append(key_columns(ones))
    if "W_V" in names:
        AX = T["AX"].reshape(B, Gs, m, n, -1).permute(1, 2, 0, 3, 4).reshape(Gs, m, N, -1)
        parts.append(torch.einsum("ghta,cf->ghtcaf", AX, eye_v).flatten(-2))
    if "b_V" in names:
        parts.append(eye_v.expand(Gs, m, N, v, v).clone())
    if not parts:
        return torch.zeros(Gs, m * v, N, 0, dtype=torch.float64, device=dev)
    K = torch.cat(parts, -1)                                               # (G', m, N, v, c)
    if not row_order:
        return K.reshape(Gs, m * v, N, -1)
    return K.permute(0, 1, 3, 2, 4).reshape(Gs, m * v, N, -1)


def group_block(config: AttentionConfig, terms: StageTerms, stage: Stage, g: int,
                absolute: bool = False) -> torch.Tensor:
    """K_{b,g} of one group, (m v, N, c) (``stage_blocks``)."""
    return stage_blocks(config, terms, stage, range(g, g + 1), absolute)[0]


def group_parameters(config: AttentionConfig, stage: Stage) -> list[tuple[str, int | None]]:
    """The column groups of K_{b,g}, in order: ("W_Q", h) and ("b_Q", h) per head of the group
    (its rows of the stage, e fastest), ("W_K", None), ("b_K", None), ("W_V", None), ("b_V", None)
    where present in the stage.  Within a group of columns: (coordinate a, width index e or f)."""
    m, has = config.group_size, config.has_bias
    out: list[tuple[str, int | None]] = []
    a = stage.hi - stage.lo
    for hl in range(m):
        if a:
            out.append(("W_Q", hl))
        if stage.qk_biases and has("q"):
            out.append(("b_Q", hl))
    if a:
        out.append(("W_K", None))
    if stage.qk_biases and has("k"):
        out.append(("b_K", None))
    if a:
        out.append(("W_V", None))
    if stage.hi == 0 and has("v"):
        out.append(("b_V", None))
    return out


def group_index(config: AttentionConfig, stage: Stage, g: int) -> torch.Tensor:
    """Positions, in the flat parameter vector (``idlib.attention.flatten``), of K_{b,g}'s columns."""
    index = _flat_index(config)
    m, cols, parts = config.group_size, list(stage.coordinates), []
    for name, hl in group_parameters(config, stage):
        if name == "W_Q":
            parts.append(index["W_Q"][g * m + hl, cols])
        elif name == "b_Q":
            parts.append(index["b_Q"][g * m + hl])
        elif name in ("W_K", "W_V"):
            parts.append(index[name][g, cols])
        else:
            parts.append(index[name][g])
    return torch.cat([p.reshape(-1) for p in parts]) if parts else torch.zeros(0, dtype=torch.long)


def y_index(config: AttentionConfig, stage: Stage) -> torch.Tensor:
    """Positions (n_y, d) of the parameters behind Y's columns, for every output j:
    W_O[h', c, j] for Y's column (c, h'), and b_O[j] for the ones column."""
    index = _flat_index(config)
    rows = [index["W_O"][hc] if name == "W_O" else index["b_O"]
            for name, hc in y_parameters(config, stage)]
    return torch.stack(rows) if rows else torch.zeros(0, config.d_model, dtype=torch.long)


def _flat_index(config: AttentionConfig) -> dict[str, torch.Tensor]:
    """Name -> the positions of that parameter's entries in the flat vector, in its shape."""
    out, i = {}, 0
    for name, shape in param_shapes(config).items():
        size = math.prod(shape)
        out[name] = torch.arange(i, i + size).reshape(shape)
        i += size
    return out


# -- the certificate of one block ------------------------------------------------------------

def power_of_two_scale(norms: torch.Tensor) -> torch.Tensor:
    """2^-e with norms 2^-e in [1/2, 1) (exact scalings); 0 where the norm is 0 (a zero column)."""
    e = torch.frexp(norms)[1]
    return torch.where(norms > 0, torch.ldexp(torch.ones_like(norms), -e), torch.zeros_like(norms))


def pivoted_columns(G: torch.Tensor, cut2: float) -> torch.Tensor:
    """Columns chosen by greedy (diagonally pivoted) Cholesky of the Gram matrix G, until every
    remaining residual is at most cut2: a well-conditioned subset spanning what the rest adds."""
    n = G.shape[0]
    if n == 0:
        return torch.zeros(0, dtype=torch.long, device=G.device)
    test = G.clone()
    test.diagonal().sub_(cut2)
    if torch.linalg.cholesky_ex(test)[1].item() == 0:
        return torch.arange(n, device=G.device)
    L = torch.zeros(n, n, dtype=G.dtype, device=G.device)
    residual = G.diagonal().clone()
    chosen: list[int] = []
    for i in range(n):
        j = int(torch.argmax(residual))
        if residual[j].item() <= cut2:
            break
        col = (G[:, j] - L[:, :i] @ L[j, :i]) / math.sqrt(residual[j].item())
        L[:, i] = col
        residual -= col * col
        residual[j] = -math.inf
        chosen.append(j)
    return torch.tensor(sorted(chosen), dtype=torch.long, device=G.device)


@dataclass(frozen=True)
class BlockCertificate:
    """One diagonal block [I_{n_out} (x) Y, K] (module docstring): its certified rank
    n_out |S_Y| + |S_K|, the lower bound on sigma_min of its kept (scaled) columns, the bound on
    its entries' rounding, its round-off tolerance, and the gap."""

    rank: int
    rows: int
    columns: int
    sigma_lower: float
    rounding: float
    tolerance: float
    gap: float
    kept: torch.Tensor


def gram_error(N: int, rows: int, n_y: int, n_out: int, s: int, y2: float, k2: float) -> float:
    """2 x (the rounding in forming the block's Gram matrix + the block Cholesky's backward error),
    in the 2-norm (module docstring, step 3); y2, k2 the squared Frobenius norms of Y and K_S."""
    yk = math.sqrt(y2 * k2)
    forming = gamma(N) * (y2 + yk) + gamma(rows) * k2
    factor = gamma(n_y + 1) * y2 + gamma(n_y) * yk + gamma(n_out * n_y + s + 1) * k2
    return 2.0 * (forming + factor + U * max(1.0, y2, k2))


def block_cholesky_passes(GY: torch.Tensor, B: torch.Tensor, GK: torch.Tensor,
                          mu: torch.Tensor) -> torch.Tensor:
    """Per block g: whether [[I (x) GY, B_g], [B_g^T, GK_g]] - mu_g I passes a Cholesky factorisation,
    by blocks: GY - mu I = C C^T, W_j = C^{-1} B_j, GK - mu I - sum_j W_j^T W_j = C_S C_S^T.

    GY (n_y, n_y), B (G, n_out, n_y, s), GK (G, s, s), mu (G,); returns a bool tensor (G,)."""
    eye_s = torch.eye(GK.shape[-1], dtype=torch.float64, device=GK.device)
    S = GK - mu[:, None, None] * eye_s
    ok = torch.ones(GK.shape[0], dtype=torch.bool, device=GK.device)
    if GY.shape[0]:
        T = GY - mu[:, None, None] * torch.eye(GY.shape[0], dtype=torch.float64, device=GY.device)
        C, info = torch.linalg.cholesky_ex(T)
        ok &= info == 0
        if S.shape[-1]:
            W = torch.linalg.solve_triangular(C[:, None], B, upper=False)     # (G, n_out, n_y, s)
            S = S - torch.einsum("gjyp,gjyq->gpq", W, W)
    if S.shape[-1]:
        ok &= torch.linalg.cholesky_ex(S)[1] == 0
    return ok


def certify_stage(Y: torch.Tensor, FY: torch.Tensor, K: torch.Tensor, FK: torch.Tensor,
                  e_E: float, y_kept: torch.Tensor | None = None,
                  scale_in_place: bool = False) -> list[BlockCertificate]:
    """Certify rank [I_{n_out} (x) Y, K_g] >= n_out |S_Y| + |S_g| for each block g of a stage, the
    exact block being the one whose computed version is (Y, K_g) and whose entries err by at most
    e_E (FY, FK_g) (module docstring, steps 1-4).

    Y, FY (N, n_y); K, FK (G, n_out, N, c); ``y_kept``: Y's columns to keep (``select_y``; default
    all).  The blocks are certified together (batched); those whose columns must be chosen by
    pivoting are certified in groups sharing their chosen columns.  Only FK's column norms are
    used (so its rows may come in any order); ``scale_in_place``: K is scaled in place (the
    caller does not use it again)."""
    G, n_out, N, c = K.shape
    dev = K.device
    y_kept = torch.arange(Y.shape[1], device=dev) if y_kept is None else y_kept
    Dy = power_of_two_scale(FY.norm(dim=0))[y_kept]
    Ys, FYs = Y[:, y_kept] * Dy, FY[:, y_kept] * Dy
    FK2 = torch.linalg.vector_norm(FK.reshape(G, n_out * N, c), dim=1) ** 2       # (G, c)
    Dk = power_of_two_scale(FK2.sqrt())
    FK2D = FK2 * Dk * Dk                  # squared column norms of the scaled F (exact scalings)
    KD = K.mul_(Dk[:, None, None, :]) if scale_in_place else K * Dk[:, None, None, :]
    # 2. selection (no rigour needed): the part of K orthogonal to I (x) Y, pivoted Cholesky
    if Ys.shape[1]:
        Q = torch.linalg.qr(Ys)[0]
        KP = KD - torch.einsum("ny,gjyc->gjnc", Q, torch.einsum("ny,gjnc->gjyc", Q, KD))
    else:
        KP = KD
    KPm = KP.reshape(G, n_out * N, c)
    GP = KPm.transpose(1, 2) @ KPm
    del KP, KPm
    cut2 = SELECT_CUT ** 2
    test = GP - cut2 * torch.eye(c, dtype=torch.float64, device=dev)
    full = (torch.linalg.cholesky_ex(test)[1] == 0) & (Dk > 0).all(dim=1) if c else \
        torch.ones(G, dtype=torch.bool, device=dev)
    kept_of = {}
    for g in range(G):
        if full[g]:
            kept_of[g] = torch.arange(c, device=dev)
        else:
            nonzero = (Dk[g] > 0).nonzero().reshape(-1)
            kept_of[g] = nonzero[pivoted_columns(GP[g][nonzero][:, nonzero], cut2)]
    batches: dict[tuple[int, ...], list[int]] = {}
    for g, kept in kept_of.items():
        batches.setdefault(tuple(kept.tolist()), []).append(g)
    out: dict[int, BlockCertificate] = {}
    for kept_key, gs in batches.items():
        kept = torch.tensor(kept_key, dtype=torch.long, device=dev)
        if len(gs) == G and len(kept_key) == c:        # every block keeps every column: no copies
            certs = _certify_kept(Ys, FYs, KD, FK2D, GP, e_E, n_out, c)
        else:
            idx = torch.tensor(gs, dtype=torch.long, device=dev)
            certs = _certify_kept(Ys, FYs, KD[idx][..., kept], FK2D[idx][:, kept],
                                  GP[idx][:, kept][:, :, kept], e_E, n_out, c)
        for g, cert in zip(gs, certs):
            out[g] = BlockCertificate(cert.rank, cert.rows, cert.columns, cert.sigma_lower,
                                      cert.rounding, cert.tolerance, cert.gap, kept)
    return [out[g] for g in range(G)]


def _certify_kept(Ys: torch.Tensor, FYs: torch.Tensor, Ks: torch.Tensor, FK2: torch.Tensor,
                  GP: torch.Tensor, e_E: float, n_out: int, c: int) -> list[BlockCertificate]:
    """Steps 3 and 4 of the certificate for blocks sharing their kept columns: Ys, FYs (N, n_y)
    scaled; Ks (G, n_out, N, s) scaled; FK2 (G, s) the squared column norms of the scaled
    absolute version; GP (G, s, s) the projected Gram matrices (for the starting mu); c the
    block's full column count."""
    G, _, N, s = Ks.shape
    n_y = Ys.shape[1]
    rows, columns = n_out * N, n_out * n_y + c
    rank = n_out * n_y + s
    dev = Ks.device
    if rank == 0:
        return [BlockCertificate(0, rows, columns, math.inf, 0.0, 0.0, math.inf,
                                 torch.zeros(0, dtype=torch.long, device=dev))] * G
    Ksm = Ks.reshape(G, rows, s)
    GY = Ys.T @ Ys
    GK = GP if n_y == 0 else Ksm.transpose(1, 2) @ Ksm    # without Y nothing was projected out
    B = torch.einsum("ny,gjnc->gjyc", Ys, Ks) if n_y else Ks.new_zeros(G, Ks.shape[1], 0, s)
    y2 = GY.trace().item()
    k2 = GK.diagonal(dim1=1, dim2=2).sum(-1).tolist()
    delta = torch.tensor([gram_error(N, rows, n_y, n_out, s, y2, x) for x in k2], dtype=torch.float64, device=dev)
    tops = []
    if n_y:
        tops.append(torch.linalg.eigvalsh(GY)[0].expand(G))
    if s:
        tops.append(torch.linalg.eigvalsh(GP)[:, 0])
    mu = 0.5 * torch.stack(tops).min(dim=0).values.clamp_min(0.0)
    sigma = torch.zeros(G, dtype=torch.float64, device=dev)
    todo = torch.ones(G, dtype=torch.bool, device=dev)
    for _ in range(CERTIFY_TRIES):
        if not todo.any():
            break
        ok = block_cholesky_passes(GY, B, GK, mu + delta) & todo & (mu > 0)
        sigma = torch.where(ok, mu.sqrt(), sigma)
        todo &= ~ok
        mu = torch.where(todo, mu / 4.0, mu)
    # 4. the entries' rounding (Weyl) and the book's tolerance of the block (Frobenius norms)
    F2 = n_out * (FYs * FYs).sum() + FK2.sum(dim=1)
    rounding = e_E * F2.sqrt()
    tolerance = (y2 + torch.tensor(k2, dtype=torch.float64, device=dev) + delta).sqrt() * max(rows, columns) * EPS
    gap = sigma / torch.maximum(rounding, tolerance)
    return [BlockCertificate(rank, rows, columns, sigma[g].item(), rounding[g].item(),
                             tolerance[g].item(), gap[g].item(), torch.zeros(0, dtype=torch.long))
            for g in range(G)]


def certify_block(Y: torch.Tensor, FY: torch.Tensor, K: torch.Tensor, FK: torch.Tensor,
                  e_E: float, y_kept: torch.Tensor | None = None) -> BlockCertificate:
    """``certify_stage`` for one block, K and FK of shape (n_out, N, c)."""
    return certify_stage(Y, FY, K[None], FK[None], e_E, y_kept)[0]


def select_y(Y: torch.Tensor, FY: torch.Tensor) -> torch.Tensor:
    """Y's columns to keep (scaled as in ``certify_block``; all of them unless Y is deficient)."""
    if not Y.shape[1]:
        return torch.zeros(0, dtype=torch.long, device=Y.device)
    Ys = Y * power_of_two_scale(FY.norm(dim=0))
    return pivoted_columns(Ys.T @ Ys, SELECT_CUT ** 2)


# -- one run -----------------------------------------------------------------------------

def predicted_gradient(config: AttentionConfig, stage: Stage, Y: torch.Tensor,
                       blocks: list[torch.Tensor], cotangent: torch.Tensor) -> torch.Tensor:
    """u^T J[R_b, C_b] from the blocks, for a cotangent u of shape (N, d) on the stage's outputs:
    K_{b,g}^T u on group g's columns, Y^T u on the W_O entries and b_O.  Returns (positions, values)
    as one (2, n) tensor pair: the flat positions of C_b and u^T J there."""
    m, v = config.group_size, config.value_dim
    pos, val = [], []
    for g, K in enumerate(blocks):
        u = cotangent[:, g * m * v:(g + 1) * m * v].T                      # (m v, N)
        pos.append(group_index(config, stage, g))
        val.append(torch.einsum("jn,jnc->c", u, K))
    yi = y_index(config, stage)
    if yi.numel():
        pos.append(yi.reshape(-1))
        val.append((Y.T @ cotangent).reshape(-1))
    return torch.cat(pos), torch.cat(val)


def check_stage(config: AttentionConfig, p: Params, X: torch.Tensor, stage: Stage, Y: torch.Tensor,
                blocks: list[torch.Tensor], frequencies: torch.Tensor | None, seed: int) -> None:
    """Guard: the stage's blocks against the layer's own forward pass (``idlib.attention.forward``,
    every variant hook), by one backward pass: for a random cotangent u on the stage's outputs,
    u^T J must be the blocks' on the stage's columns (to 1e-9 relative) and exactly zero on the
    later coordinates' columns (the triangular structure).  BlockError if not."""
    theta = flatten(p).detach().requires_grad_(True)
    gen = torch.Generator().manual_seed(seed + 77 * stage.hi)
    out = forward(config, unflatten(config, theta), X, frequencies).reshape(-1, config.d_model)
    u = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(out.device)
    grad = torch.autograd.grad((out * u).sum(), theta)[0].detach()
    later = _later_index(config, stage).to(grad.device)
    if later.numel() and grad[later].abs().max().item() != 0.0:
        raise BlockError(f"stage {stage.lo}..{stage.hi}: the outputs move along later "
                         "coordinates' parameters (no triangular structure)")
    pos, predicted = predicted_gradient(config, stage, Y, blocks, u)
    actual = grad[pos.to(grad.device)]
    err = (predicted - actual).abs().max().item() if pos.numel() else 0.0
    if err > 1e-9 * max(actual.abs().max().item(), 1e-300):
        raise BlockError(f"stage {stage.lo}..{stage.hi}: the closed-form blocks differ from the "
                         f"layer's forward pass by {err:.2e} (a variant the blocks do not model?)")


def _later_index(config: AttentionConfig, stage: Stage) -> torch.Tensor:
    """Positions of the parameters of coordinates after the stage (and of b_Q, b_K before theirs)."""
    index, hi, v = _flat_index(config), stage.hi, config.value_dim
    parts = [index[name][:, hi:] for name in ("W_Q", "W_K", "W_V")]
    parts.append(index["W_O"][:, max(hi, 0):v] if hi < v else index["W_O"][:, :0])
    if hi == 0:
        parts += [index[name] for name in ("b_Q", "b_K") if name in index]
    return torch.cat([p.reshape(-1) for p in parts])


@dataclass(frozen=True)
class BlockRank:
    """Result of :func:`block_rank`.  ``rank`` is the certified lower bound sum_b rank E_b;
    ``certified`` when every block's gap is at least 1e4 and ``rank`` equals the closed form's
    P - U (then it is the generic rank; module docstring)."""

    rank: int
    closed_form: int
    n_params: int
    n_rows: int
    gap: float
    certified: bool
    block_sigma_lower: torch.Tensor     # each block's certified sigma_min bound (scaled columns)
    n_blocks: int
    factors: dict = field(default_factory=dict)


BLOCK_BYTES = 1 << 28     # a stage's blocks are made and certified for this many bytes of K at a time
SMALL_STAGE_FLOPS = 2e8   # stages with fewer Gram-matrix flops run on one thread (module docstring)


@contextmanager
def threads_for(config: AttentionConfig, stage: Stage, device: torch.device):
    """Run a small stage on one CPU thread, then restore torch's thread count.  Its tensors are
    tiny (d = 256, H = 16: blocks of 576 x 48): a second thread only waits at every operation's
    barrier, and on a busy machine that wait costs more than the work (measured: 8 s of CPU for
    the whole layer on one thread, 75 s on two beside other jobs)."""
    m, v = config.group_size, config.value_dim
    c = _group_columns(config, stage.lo, stage.hi, stage.qk_biases)
    flops = 2 * config.n_kv_heads * m * v * stage.n_tokens * c * c
    before = torch.get_num_threads()
    small = device.type == "cpu" and flops < SMALL_STAGE_FLOPS and before > 1
    if small:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if small:
            torch.set_num_threads(before)


def group_chunk(config: AttentionConfig, stage: Stage) -> int:
    """Key/value groups whose blocks are made and certified together (about ``BLOCK_BYTES`` of
    K each time; its absolute version and the projection take as much again each)."""
    m, v = config.group_size, config.value_dim
    per_group = 8 * m * v * stage.n_tokens * max(1, _group_columns(config, stage.lo, stage.hi,
                                                                    stage.qk_biases))
    return max(1, min(config.n_kv_heads, BLOCK_BYTES // per_group))


BASE_BYTES = 400 * 2 ** 20   # the interpreter, torch and the layer's parameters, roughly


def estimated_bytes(config: AttentionConfig) -> int:
    """An estimate of the peak memory of ``block_rank`` (float64), before anything is built: over
    the stages, the blocks of one chunk of groups (K, its absolute version, both scaled, the
    projection: 5 x 8 x chunk m v N c bytes, and three Gram matrices 8 chunk c^2) plus the stage's
    attention terms (A (v - Z) and its absolute version, the key/value covariances, and with RoPE
    the rotated queries R_s^T q_t: about 8 B H n^2 (4 v + 4 k) bytes)."""
    m, v, k, H = config.group_size, config.value_dim, config.head_dim, config.n_heads
    rot = config.rotary_dim > 0
    worst = 0
    for st in stages(config):
        B, n, N = st.n_sequences, st.seq_len, st.n_tokens
        c = _group_columns(config, st.lo, st.hi, st.qk_biases)
        chunk = group_chunk(config, st)
        blocks = 8 * chunk * (5 * m * v * N * c + 3 * c * c)
        terms = 8 * B * H * n * (n * (4 * v + (4 * k if rot else 0)) + 4 * v * k)
        worst = max(worst, blocks + terms)
    return BASE_BYTES + worst


def checked_stages(n: int) -> set[int]:
    """Indices of the stages ``block_rank`` checks against the forward pass: CHECKED_STAGES of
    them, evenly spread, the first and the last included."""
    if n <= CHECKED_STAGES:
        return set(range(n))
    return {round(i * (n - 1) / (CHECKED_STAGES - 1)) for i in range(CHECKED_STAGES)}


def certify_one_stage(config: AttentionConfig, p: Params, stage: Stage, seed: int,
                      frequencies: torch.Tensor | None, check: bool,
                      seconds: dict[str, float]) -> list[BlockCertificate]:
    """Every diagonal block of one stage, certified (``certify_stage``): the G groups' blocks
    (in chunks of ``group_chunk``) and the block of the outputs no head writes (H v < d).
    ``check``: compare the blocks with the forward pass first (``check_stage``).  ``seconds``
    accumulates the time of each phase."""
    d, G, v, H = config.d_model, config.n_kv_heads, config.value_dim, config.n_heads
    device = p["W_Q"].device
    t0 = time.perf_counter()
    X = stage_inputs(config, stage, seed, device)
    terms = stage_terms(config, p, X, stage, frequencies)
    Y, FY = y_block(config, terms, stage)
    y_kept = select_y(Y, FY)
    seconds["terms"] += time.perf_counter() - t0
    blocks, certs = [], []
    chunk = group_chunk(config, stage)
    for g0 in range(0, G, chunk):
        t1 = time.perf_counter()
        groups = range(g0, min(G, g0 + chunk))
        ordered = check or Y.shape[1] > 0      # Y's projection and the check read rows by output
        K = stage_blocks(config, terms, stage, groups, row_order=ordered)
        FK = stage_blocks(config, terms, stage, groups, absolute=True, row_order=False)
        t2 = time.perf_counter()
        certs += certify_stage(Y, FY, K, FK, terms.e_E, y_kept, scale_in_place=not check)
        seconds["blocks"] += t2 - t1
        seconds["certify"] += time.perf_counter() - t2
        del FK
        if check:
            blocks += list(K)
    if d > H * v and Y.shape[1]:     # outputs no head writes: W_O and b_O only
        empty = torch.zeros(d - H * v, Y.shape[0], 0, dtype=torch.float64, device=device)
        certs.append(certify_block(Y, FY, empty, empty, terms.e_E, y_kept))
    if check:
        t3 = time.perf_counter()
        check_stage(config, p, X, stage, Y, blocks, frequencies, seed)
        seconds["check"] += time.perf_counter() - t3
    return certs


def block_rank(config: AttentionConfig, params: Params | None = None, seed: int = 0,
               frequencies: torch.Tensor | None = None, device: torch.device | str | None = None,
               check: bool = True) -> BlockRank:
    """Certified lower bound on the Jacobian rank at the route's point (module docstring).

    ``params`` (default ``init_params(config, seed)``) gives W_Q, W_K, b_Q, b_K; the rest of the
    point is fixed (``block_point``); the tokens are seeded by ``seed``.  ``device``: where every
    tensor is made and every product runs (float64).  ``check``: compare some stages' blocks with
    the forward pass (``check_stage``).
    """
    rule = applicable(config)
    if rule is not None:
        raise BlockError(rule)
    device = torch.device("cpu") if device is None else torch.device(device)
    params = init_params(config, seed) if params is None else params
    p = block_point(config, params, device)
    if frequencies is not None:
        frequencies = frequencies.to(device=device, dtype=torch.float64)
    plan = stages(config)
    check_at = checked_stages(len(plan)) if check else set()
    rank, n_rows, gaps, sigmas = 0, 0, [], []
    worst = (math.inf, None)
    seconds = {"terms": 0.0, "blocks": 0.0, "certify": 0.0, "check": 0.0}
    for i, stage in enumerate(plan):
        with threads_for(config, stage, device):
            certs = certify_one_stage(config, p, stage, seed, frequencies, i in check_at, seconds)
        for c in certs:
            if c.rank:
                gaps.append(c.gap)
                sigmas.append(c.sigma_lower)
                if c.gap < worst[0]:
                    worst = (c.gap, (stage.lo, stage.hi))
        rank += sum(c.rank for c in certs)
        n_rows += stage.n_tokens * config.d_model
    P = n_params(config)
    closed_form = count(config, frequencies).identified
    gap = min(gaps) if gaps else math.inf
    factors = {"seconds": seconds, "worst_block_stage": worst[1], "n_stages": len(plan),
               "device": str(device)}
    return BlockRank(rank=rank, closed_form=closed_form, n_params=P, n_rows=n_rows, gap=gap,
                     certified=bool(is_certified(gap) and rank == closed_form),
                     block_sigma_lower=torch.tensor(sorted(sigmas), dtype=torch.float64),
                     n_blocks=len(gaps), factors=factors)
