r"""A fast, certified Jacobian rank for attention layers: eliminate the output projection exactly,
split the rest by key/value group, and certify the cut on the full Jacobian itself.

The dense route (:func:`idlib.rank.measure` with ``method="dense"``) forms the whole Jacobian
J (m x P, m = B n d rows for B sequences of n tokens) and takes all its singular values: about
4 m P^2 flops, ~10^13 at P = 16,384.  This module uses the layer's structure to decide the rank
from H small problems, and then certifies the gap sigma_r / max(sigma_{r+1}, tau) *of J*
(tau the round-off tolerance, :mod:`idlib.rank`) with bounds
that are computed on J (not on the reduced problems) and hold for any outcome.

**Structure.**  Stack the per-head outputs before the output projection as
Z = [Z_1, ..., Z_H] (Bn x Hv rows = (sequence, token), columns = (head, value dim)),
Z_h = softmax(Q_h K_g^T / sqrt(k)) V_g, and W = [W_O^1; ...; W_O^H] (Hv x d).  Then

    out = Z W + 1 b_O^T = Z' W',   Z' = [Z, 1] (with an output bias; else Z' = Z),
    delta out = delta Z W + Z' delta W',

where delta Z depends only on the remaining parameters theta_R (queries, keys, values and their
biases).  In vec form, J = [(W^T (x) I) J_Z, I_d (x) Z'].  Two facts make it small:

1. Z_h depends only on the parameters of h's key/value group g, so J_Z is block diagonal: one
   block J_Z^g of (m v B n) x P_g per group (m = H / G heads, P_g their query, key and value
   parameters).
2. With Z' = Q R (thin QR, c = columns of Z') and Pi = I - Q Q^T, and W of full row rank
   (H v <= d, generic), ``J x = 0`` iff ``Pi delta Z = 0`` and ``delta W' = -R^{-1} Q^T delta Z W``
   (apply Pi, then cancel W on the right; the rest is solved by R).  Hence, with
   K_g = (I_{mv} (x) Pi) J_Z^g,

       ker J = { (n, -L n) : n in ker K_1 (+) ... (+) ker K_G },
       rank J = P - sum_g dim ker K_g.

   The rank is read off G small SVDs (K_g has P_g = 1,536 columns at d = 64, H = 8) instead of
   one of J (16,384 columns).

**Certificate (on J).**  Let r = P - u be the rank found, u = sum_g (P_g - r_g).

* Upper bound.  Lift each computed kernel vector n of K_g to x = (n, -L n) (X, P x u, the
  lift computed in float64), evaluate J X = vec(J_Z X W + Z' delta W'(X)) from the blocks J_Z^g
  and Z' themselves (``lifted_image``: J's definition, not the reduction -- no Pi, no R^{-1} --
  so rounding in the lift shows up in J X instead of cancelling), and orthonormalise: with
  X^T X = L L^T (Cholesky), V = X L^{-T} has orthonormal columns and sigma_i(J V)^2 are the
  eigenvalues of L^{-1} (J X)^T (J X) L^{-T} (two Gram matrices of order u; the largest, the one
  the gap uses, to relative ~u eps).  By Courant--Fischer, sigma_{r+1}(J) <= ||J V||_2, and more
  generally sigma_{r+i}(J) <= sigma_i(J V).
* Lower bound (coupled; Schur complement and Haynsworth inertia).  Write x = (p, y), p the
  query/key/value parameters, y = delta W'.  With D = I_d (x) R^T R (the y-block of J^T J, smallest
  eigenvalue s^2, s = sigma_min(Z')) and L = R^{-1} Q^T delta Z(.) W (the output change least
  squares would absorb; the kernel is {(n, -L n)}), the Schur complement of D in J^T J - lam I is

      S(lam) = K_W^T K_W - lam I - lam L^T (I - lam D^{-1})^{-1} L,   K_W p = vec(Pi delta Z(p) W),

  and for lam < s^2 Haynsworth's inertia formula gives #{eigenvalues of J^T J below lam} =
  #{negative eigenvalues of S(lam)}.  With lam <= s^2 / 2 and c = 1 / (1 - lam / s^2) <= 2,
  S(lam) >= K_W^T K_W - lam (I + c L^T L);
  if that is >= 0 on S_p = (row space of K_1) (+) ... (+) (row space of K_G) (dimension P_p - u),
  S(lam) has at most u negative eigenvalues, so sigma_r(J) = sigma_{P-u}(J) >= sqrt(lam).
  Two estimates make the test small.  (i) With K_g = U_g Sigma_g V_g^T (its r_g nonzero
  singular values), p = V c on S_p, E = K p = U Sigma c (Bn x Hv) and W = sum_i sigma_i u_i v_i^T
  (ascending sigma_i, H v <= d):  ||K_W p||^2 = ||E W||^2 = sum_i sigma_i^2 ||E u_i||^2
  >= alpha ||Sigma c||^2 - ||Delta^{1/2} T Sigma c||^2, alpha = sigma_{j+1}^2, Delta = diag(alpha -
  sigma_i^2)_{i <= j}, T Sigma = (U_j^T (x) I) K V (rows (token, i), one column block per group):
  the j smallest directions of W are kept exactly, the rest bounded by alpha.  (ii) ||L p|| <=
  ||W||_2 ||(I (x) R^{-1} Q^T) J_Z p||, block diagonal over groups: N_g = I + c ||W||^2
  V_g^T M_g^T M_g V_g, M_g = (I (x) R^{-1} Q^T) J_Z^g.  So lam is certified when

      alpha Sigma^2 - lam N - (T Sigma)^T Delta (T Sigma) >= 0,

  i.e. every C_g C_g^T = alpha Sigma_g^2 - lam N_g has a Cholesky factor and
  ||Delta^{1/2} [T_1 Sigma_1 C_1^{-T}, ..., T_G Sigma_G C_G^{-T}]||_2 < 1, i.e. (1 - SAFETY) I
  minus that Gram matrix (order B n j) has a Cholesky factor too.  ``coupled_lower_bound``
  searches lam from min(s^2 / 2, alpha min_g sigma_{r_g}(K_g)^2) down by factors of 4 until the
  test passes, then refines by 2, 2^(1/2) and 2^(1/4) -- this search in float32, at half the
  cost -- and certifies the lam found with the float64 test (lowering it by 2^(1/4) until that
  passes); the float64 test carries a relative margin ``SAFETY`` = 1e-6 for rounding on both
  sides.  j = ceil(H v / 8), at most 16,000 / (B n) (``coupled_directions``): W is square when
  H v = d, and its smallest singular values (~ sigma_max / d) are what the uncoupled bound below
  pays for; the bound grows about linearly with j (sigma_{j+1}(W) does), its cost as j^2.
  Measured: the bound is 7x and 9x below the dense route's sigma_r at P = 1,024 and 4,096
  (``make bench`` records it at every size where both routes run).
* Lower bound (uncoupled, also computed; the larger of the two is used).  Let S = (row space
  of K_1) (+) ... (+) (row space of K_G) (+) R^{P_O} (all output parameters), dim S = r.  By Courant--Fischer sigma_r(J) >= min_{x in S} ||J x|| / ||x||.
  For x = (p, y) (y = delta W') write y' = y + L p with L p = R^{-1} Q^T delta Z(p) W, the
  output change that least squares would absorb.  Then
  ||J x||^2 = ||Pi delta Z W||^2 + ||R y'||^2 >= a^2 ||p||^2 + s^2 ||y'||^2, with

      a = sigma_min(W) * min_g sigma_{r_g}(K_g),   s = sigma_min(Z') = sigma_min(R),
      ell = ||W||_2 * max_g ||(I (x) R^{-1} Q^T) J_Z^g||_2  >=  ||L||

  (or sqrt(sum_g ||W_g||^2 ||(I (x) R^{-1} Q^T) J_Z^g||^2), W_g group g's rows, if smaller),
  while ||x||^2 <= ||p||^2 + (||y'|| + ell ||p||)^2.  Cauchy--Schwarz on the last term gives
  ||x||^2 <= (a^2 ||p||^2 + s^2 ||y'||^2) ((1 + ell^2) / a^2 + 1 / s^2), so

      sigma_r(J) >= 1 / sqrt((1 + ell^2) / a^2 + 1 / s^2).

  (With ell <= b / s, b = ||W||_2 max_g ||(I (x) Q^T) J_Z^g||_2, this is at least the cruder
  a s / sqrt(a^2 + b^2 + s^2).)

* Tolerance.  ||J||_2 <= (||W||_2^2 max_g ||J_Z^g||_2^2 + ||Z'||_2^2)^(1/2) (J = [A, B] with
  A = (W^T (x) I) J_Z, J_Z block diagonal over groups, B = I (x) Z') and ||J_Z^g||_2 <=
  (||Q^T J_Z^g||^2 + ||K_g||^2)^(1/2), so tau' = (that bound) max(m, P) eps is at least the
  tolerance tau of J.

So ``gap`` = [that lower bound on sigma_r] / max(||J V||_2, tau') is a lower bound on
sigma_r / max(sigma_{r+1}, tau) of J, and the rank is certified when it is at least 1e4.
Nothing in the bounds assumes the reduction is valid: if W were
rank deficient or Z' ill conditioned, a or s would be ~0 and the bound would (correctly) fail to certify.  The bounds are exact up to
float64 rounding in computing them (relative ~1e-13 here), the singular values of Z', R and W
are taken by SVD, those of J V and the blocks K_g from Gram matrices (for J V the largest, which
is relatively accurate; nothing is certified from the smaller ones); the blocks' Gram eigenvalues give
sigma_i(K_g) to ~sqrt(eps) sigma_1 absolute, far below the smallest nonzero ones (~1e-2
sigma_1), and a wrong cut could only make a bound fail (a kernel vector in S_p, or a nonzero
direction in V), never certify a wrong rank.

**Cost**, with m = H / G, P_g = (m + 1) d k + d v query/key/value parameters per group, B n
tokens (idlib's defaults give B n ~ 7 d), c = H v (+ 1) columns of Z', r_g = P_g - u_g, u the
unidentified count and j <= 16,000 / (B n):

* blocks J_Z^g in closed form (``_group_jacobian_closed``): writing them, G B n m v P_g, plus
  G 2 B m n^2 d k v for the key columns (the sum over keys s of A_ts (v_s - Z_t) x_s (R_s^T q_t));
  by forward mode (layers with parameterless query/key norms) G P_g tangents through one
  group's heads, ~ G P_g [2 B n d (m k + k + v) + 2 B n^2 m (k + v)] flops;
* per group the Gram matrix of the projected block (B n m v x P_g) and its eigenvectors.  The
  value columns are Kronecker products (``block_gram``: K = [K_o, Y (x) I_v] up to the order of
  rows, Y = Pi A [X, 1]), so only the n_o = (m + 1) d k query/key columns need a full Gram
  matrix, formed from its lower block triangle (``gram``, 5/8 of a GEMM):
  ~ G ((5/4) B n m v n_o^2 + 2 B n m v n_o (d + 1) + 9 P_g^3) flops, ~ 4 x 10^12 at d = 128,
  H = 16 (P_g = 3,072, n_o = 2,048), nine tenths of it the eigensolver (the Gram matrix
  dominates only where B n m v >> P_g: at d = 45, H = 5 it was half of the work);
* the norms ||Q^T delta Z_g|| and ||R^{-1} Q^T delta Z_g|| (c m v x P_g): a Gram matrix of
  order n = min(c m v, P_g), 2 c m v P_g n flops, then (``_norm2``) eigh up to n = 1,024 and
  above a certified upper bound, 40 subspace-iteration steps and a Cholesky test or a few
  (n^3 / 3 each), instead of eigh's 9 n^3 (at d = 128 with 4 key/value groups, n = 4,096:
  ``verify`` took 622 s with eigh there and 568 s without, on one machine);
* the coupled bound: G (2 B n j n_o r_g + 2 B n m (d + 1) j r_g + 2 c m v P_g r_g) to set up
  (``projected_times``, the value columns again through Y), then per test (about six
  in float32, usually one in float64) G (r_g^3 / 3 + B n j r_g^2 + (5/8) (B n j)^2 r_g) +
  (B n j)^3 / 3 -- the dominant term at d = 128 (B n j = 14,560: ~10^13 per test);
* the upper bound: J X from the blocks, G (2 B n m v P_g u_g + 2 B n d (m v + c) u_g) flops,
  then the Gram matrices of X and J X (B n d x u), ~ (c d + B n d) (1 + 1/G) u^2 from their
  column blocks (``gram_of_blocks``; X is never formed: its parts lie on disjoint rows, N_g on
  group g's and every dW_g on W', so X^T X = blockdiag(N_g^T N_g) + D^T D, D = [dW_1, ..., dW_G]).

Memory (float64): one group's block at a time, 3 x 8 B n m v P_g bytes; kept per group
8 (B n j r_g + r_g^2) bytes (and a float32 copy during the search) plus the test's Gram
matrix, 8 (B n j)^2; D, 8 c d u, and J X, 8 B n d u.  J itself
(8 B n d P bytes, 60 GB at d = 128) is never formed.  Measured on this project's 2-core
machine (AMD EPYC, 78 GFLOP/s float64 GEMM; ``make bench`` records the figures in
benchmarks/results/): d = 45, H = 5 (P = 8,100) in 5.7 s; d = 64, H = 8 (P = 16,384) in 24 s,
certified gap 3.7e7; d = 128, H = 16 (P = 65,536) in 499 s and 9.6 GB peak, certified gap
4.1e6; with 4 key/value groups 568 s, 4.6e6; full RoPE 557 s, 4.4e6; all four biases 442 s,
1.2e6 (benchmarks/results/verify_large.json).
The dense SVD of the 29,568 x 16,384 Jacobian would need ~4 x 29,568 x 16,384^2 = 3 x 10^13
flops, that of the 116,480 x 65,536 one 2 x 10^15 (and 61 GB to hold it).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from .lazy import torch

from .attention import (Flow, Params, apply_rope, attention_weights, center, flatten, forward,
                        n_params, param_shapes, project, rope_frequencies, run, unflatten)
from .certify import rank_from_singular_values, roundoff_tolerance
from . import variants
from .config import AttentionConfig

__all__ = ["StructuredRank", "StructureError", "structured_rank", "applicable", "group_config",
           "group_parameter_index", "head_outputs", "lifted_image"]


class StructureError(ValueError):
    """The layer lacks the structure the fast route needs (one line naming the rule)."""


@dataclass(frozen=True)
class StructuredRank:
    """Result of :func:`structured_rank` (all bounds are on the full Jacobian J)."""

    rank: int
    n_params: int
    n_rows: int
    gap: float                      # lower bound on sigma_r(J) / max(sigma_{r+1}(J), tau)
    sigma_r_lower: float            # lower bound on sigma_r(J)
    sigma_next_upper: float         # ||J V||_2 >= sigma_{r+1}(J)  (0 when u = 0)
    kernel_singular_values: torch.Tensor   # sigma_i(J V), upper bounds on J's u smallest
    block_ranks: tuple[int, ...]    # r_g of each K_g
    block_gaps: tuple[float, ...]   # sqrt(lambda_{r_g} / max(lambda_{r_g + 1}, tol)) of K_g^T K_g
    factors: dict = field(default_factory=dict)   # a, b, s, sigma_min(W), ... (diagnostics)


def head_outputs(config: AttentionConfig, params: Params, X: torch.Tensor,
                 frequencies: torch.Tensor | None = None) -> torch.Tensor:
    """Z of shape (B, H, n, v): each head's output before the output projection (every stage of
    the forward pass but the last, ``output``)."""
    return run(Flow(config, params, X, frequencies), variants.STAGES[:-1]).heads


def group_parameter_index(config: AttentionConfig, g: int) -> torch.Tensor:
    """Positions, in the flat parameter vector, of key/value group g's query/key/value parameters.

    Order: W_Q of its m heads, W_K, W_V, then b_Q, b_K, b_V if present (as in ``_group_params``).
    """
    m = config.group_size
    index = unflatten(config, torch.arange(n_params(config)))
    heads = slice(g * m, (g + 1) * m)
    parts = [index["W_Q"][heads], index["W_K"][g:g + 1], index["W_V"][g:g + 1]]
    for name, sl in (("b_Q", heads), ("b_K", slice(g, g + 1)), ("b_V", slice(g, g + 1))):
        if name in index:
            parts.append(index[name][sl])
    return torch.cat([p.reshape(-1) for p in parts])


def _group_shapes(config: AttentionConfig) -> list[tuple[str, tuple[int, ...]]]:
    m, d, k, v = config.group_size, config.d_model, config.head_dim, config.value_dim
    shapes = [("W_Q", (m, d, k)), ("W_K", (1, d, k)), ("W_V", (1, d, v))]
    for name, letter, shape in (("b_Q", "q", (m, k)), ("b_K", "k", (1, k)), ("b_V", "v", (1, v))):
        if config.has_bias(letter):
            shapes.append((name, shape))
    return shapes


def group_config(config: AttentionConfig) -> AttentionConfig:
    """One key/value group as a layer of its own: its m query heads and one key/value head."""
    return config.replace(n_heads=config.group_size, n_kv_heads=1, head_dim=config.head_dim,
                          value_dim=config.value_dim)


def _group_params(config: AttentionConfig, theta_g: torch.Tensor) -> Params:
    out, i = {}, 0
    for name, shape in _group_shapes(config):
        size = math.prod(shape)
        out[name] = theta_g[i:i + size].reshape(shape)
        i += size
    return out


PLAIN_PARAMETERS = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")


def applicable(config: AttentionConfig) -> str | None:
    """None if the fast route applies to this layer, else the rule it breaks (one line).

    An allow-list: every variant the layer uses must declare the "structured" capability
    (``idlib.variants``; one layer whose only parameters are per-group projections and biases,
    no shared latent or gains, which would couple the groups), and H v <= d (W_O of full row
    rank).  A variant that declares nothing is never taken by this route.
    """
    missing = variants.unsupported(config, "structured")
    if missing:
        return (f"variant(s) {variants.named(missing)}: no structured Jacobian blocks declared "
                "(the structured route takes a layer only when every variant in it declares them)")
    extra = [name for name in param_shapes(config) if name not in PLAIN_PARAMETERS]
    if extra:
        return (f"parameters {', '.join(extra)} are shared across key/value groups "
                "(only per-group projections and biases are supported)")
    if config.n_heads * config.value_dim > config.d_model:
        return (f"n_heads * value_dim = {config.n_heads * config.value_dim} must be at most "
                f"d_model = {config.d_model} (W_O must have full row rank)")
    return None


def _jacobian_fwd(f, theta: torch.Tensor, chunk: int) -> torch.Tensor:
    """d f / d theta by forward mode, shape f(theta).shape + (theta.numel(),)."""
    eye = torch.eye(theta.numel(), dtype=theta.dtype, device=theta.device)
    push = torch.func.vmap(lambda t: torch.func.jvp(f, (theta,), (t,))[1])
    cols = [push(eye[i:i + chunk]) for i in range(0, theta.numel(), chunk)]
    return torch.movedim(torch.cat(cols), 0, -1)


def _group_jacobian(sub: AttentionConfig, theta_g: torch.Tensor, X: torch.Tensor,
                    frequencies: torch.Tensor | None, chunk: int) -> torch.Tensor:
    """d Z_g / d theta_g by forward mode, the value parameters (W_V, b_V) apart from the rest.

    Split so that a value tangent never enters the attention pattern (forward mode would carry
    its zero tangent through the softmax): value columns cost one product with A each.
    """
    base = _group_params(sub, theta_g)
    names = [name for name, _ in _group_shapes(sub)]
    offsets, i = {}, 0
    for name, shape in _group_shapes(sub):
        offsets[name] = (i, math.prod(shape), shape)
        i += math.prod(shape)
    parts = {"v": [nm for nm in names if nm in ("W_V", "b_V")],
             "qk": [nm for nm in names if nm not in ("W_V", "b_V")]}
    blocks, order = [], []
    for key in ("qk", "v"):
        sel = parts[key]
        pos = torch.cat([torch.arange(offsets[nm][0], offsets[nm][0] + offsets[nm][1]) for nm in sel])

        def f(t: torch.Tensor, sel=sel) -> torch.Tensor:
            params, j = dict(base), 0
            for nm in sel:
                size, shape = offsets[nm][1], offsets[nm][2]
                params[nm] = t[j:j + size].reshape(shape)
                j += size
            return head_outputs(sub, params, X, frequencies)

        blocks.append(_jacobian_fwd(f, theta_g[pos], chunk))
        order.append(pos)
    T = torch.cat(blocks, dim=-1)
    inverse = torch.empty_like(torch.cat(order))
    inverse[torch.cat(order)] = torch.arange(inverse.numel())
    return T[..., inverse]


def lifted_image(T: torch.Tensor, N: torch.Tensor, W_g: torch.Tensor, Zp: torch.Tensor,
                 dW: torch.Tensor) -> torch.Tensor:
    """J x for the columns x of (N on group g's query/key/value parameters, dW on W' = [W; b_O]).

    J x = vec(delta Z(x) W + Z' delta W') with delta Z(x) = J_Z^g N in group g's columns only:
    T = J_Z^g of shape (Bn, mv, P_g), N (P_g, u), W_g group g's rows of W (mv, d), Z' (Bn, c),
    dW (c, d, u).  Returns (Bn d, u), rows in the order of vec(forward(X)).
    """
    rows, d, u = T.shape[0], W_g.shape[1], N.shape[1]
    dZ = torch.einsum("rap,pk->rak", T, N)                               # (Bn, mv, u)
    out = torch.einsum("rak,ae->rek", dZ, W_g) + (Zp @ dW.reshape(dW.shape[0], -1)).reshape(rows, d, u)
    return out.reshape(rows * d, u)


def _rotate_back(x: torch.Tensor, sub: AttentionConfig, frequencies: torch.Tensor | None,
                 positions: torch.Tensor) -> torch.Tensor:
    """R_p^T x[..., p, :] (RoPE undone at position p, on the last dimension); x if no RoPE."""
    if not sub.rotary_dim:
        return x
    freqs = rope_frequencies(sub) if frequencies is None else frequencies
    return apply_rope(x, freqs, -positions)


def _group_jacobian_closed(sub: AttentionConfig, theta_g: torch.Tensor, X: torch.Tensor,
                           frequencies: torch.Tensor | None) -> torch.Tensor:
    """d Z_g / d theta_g in closed form (the Khatri-Rao structure of one group's heads), shape
    (B, m, n, v, P_g), the columns in ``_group_shapes`` order.

    With q_t = R_t (x_t W_Q^h + b_Q^h), k_s = R_s (x_s W_K + b_K), v_s = x_s W_V + b_V (R_t the
    rotation at position t), A = softmax(q k^T / sqrt(k)) and Z_t = sum_s A_ts v_s,

        delta Z_t = sum_s A_ts delta v_s + sum_s A_ts delta S_ts (v_s - Z_t),
        delta S_ts = (R_t^T k_s) . delta(x_t W_Q^h + b_Q^h) / sqrt(k) + (R_s^T q_t) . delta(x_s W_K + b_K) / sqrt(k),

    so d Z_t[c] / d W_Q^h[a, e] = x_t[a] (R_t^T C_t)[e, c] / sqrt(k) with C_t = sum_s A_ts k_s (v_s -
    Z_t)^T; d Z_t[c] / d W_K[a, e] = sum_s A_ts (v_s - Z_t)[c] x_s[a] (R_s^T q_t)[e] / sqrt(k);
    d Z_t[c] / d W_V[a, c'] = (A x)_t[a] delta_{c c'}; the biases as their weights with x = 1.
    For layers without query/key norms (``_group_jacobian`` is the forward-mode reference).
    """
    params = _group_params(sub, theta_g)
    q, k, v = project(sub, params, X, frequencies)                      # (B, m, n, k | v)
    A = attention_weights(sub, q, k)                                    # (B, m, n, n)
    Z = A @ v
    Xc = center(X) if sub.input_centered else X
    B, m, n, kd = q.shape
    vd, d = v.shape[-1], X.shape[-1]
    pos = torch.arange(n, device=X.device)
    scale = 1.0 / math.sqrt(kd)
    AD = A[..., None] * (v[:, :, None, :, :] - Z[:, :, :, None, :])     # (B, m, t, s, c)
    C = torch.einsum("bhtsc,bhse->bhcte", AD, k)                         # (B, m, c, t, e)
    RC = _rotate_back(C, sub, frequencies, pos).permute(0, 1, 3, 2, 4)   # (B, m, t, c, e)
    Rq = _rotate_back(q[:, :, :, None, :].expand(B, m, n, n, kd), sub, frequencies, pos)  # (B,m,t,s,e)
    eye_m = torch.eye(m, dtype=torch.float64, device=X.device)
    eye_v = torch.eye(vd, dtype=torch.float64, device=X.device)
    cols = {
        "W_Q": scale * torch.einsum("bta,bhtce,hg->bhtcgae", Xc, RC, eye_m).reshape(B, m, n, vd, -1),
        "W_K": scale * (torch.einsum("bhtsc,bsa,bhtse->bhtcae", AD, Xc, Rq) if sub.rotary_dim else
                        # no RoPE: R_s^T q_t = q_t for every key s, so the sum over s is A D^T X
                        torch.einsum("bhtsc,bsa->bhtca", AD, Xc)[..., None] * q[:, :, :, None, None, :]
                        ).reshape(B, m, n, vd, -1),
        "W_V": torch.einsum("bhta,cf->bhtcaf", A @ Xc[:, None], eye_v).reshape(B, m, n, vd, -1),
        "b_Q": scale * torch.einsum("bhtce,hg->bhtcge", RC, eye_m).reshape(B, m, n, vd, -1),
        "b_K": scale * torch.einsum("bhtsc,bhtse->bhtce", AD, Rq).reshape(B, m, n, vd, -1),
        "b_V": eye_v.expand(B, m, n, vd, vd),
    }
    return torch.cat([cols[name] for name, _ in _group_shapes(sub)], dim=-1)


NORM_EIGH_MAX = 1024      # Gram orders up to this: all eigenvalues; above, a certified upper bound


def _norm2(A: torch.Tensor) -> float:
    """||A||_2 rounded up, from the smaller Gram matrix G = A A^T or A^T A (GEMM speed).

    Order n <= ``NORM_EIGH_MAX``: sqrt(lambda_max(G)) (eigh) times 1 + 1e-10.  Larger (9 n^3 flops
    of eigh would cost as much as a group's own eigenproblem): theta, the largest Ritz value of
    40 steps of subspace iteration on 8 vectors (theta <= lambda_max), raised to mu = theta (1 +
    e) for e = 1e-4, 1e-3, ... until mu (1 - SAFETY) I - G passes a Cholesky factorisation in
    float64 (n^3 / 3 flops), so lambda_max <= mu as in the coupled test; sqrt(mu).  If none
    passes (e up to 1), sqrt(trace G) >= ||A||_2.
    """
    G = A @ A.T if A.shape[0] <= A.shape[1] else A.T @ A
    n = G.shape[0]
    if n <= NORM_EIGH_MAX:
        # eigh, not eigvalsh: with MKL the eigenvectors come faster than the eigenvalues alone
        return math.sqrt(max(torch.linalg.eigh(G)[0][-1].item(), 0.0)) * (1 + 1e-10)
    X = torch.randn(n, 8, generator=torch.Generator().manual_seed(0), dtype=G.dtype).to(G.device)
    for _ in range(40):
        X = torch.linalg.qr(G @ X)[0]
    theta = max(torch.linalg.eigvalsh(X.T @ G @ X)[-1].item(), G.diagonal().max().item())
    for e in (1e-4, 1e-3, 1e-2, 1e-1, 1.0):
        mu = theta * (1.0 + e)
        if _certified_below(G, mu):
            return math.sqrt(mu)
    return math.sqrt(G.trace().item()) * (1 + 1e-10)


def _certified_below(G: torch.Tensor, mu: float) -> bool:
    """True when lambda_max(G) < mu (1 - SAFETY): mu (1 - SAFETY) I - G has a Cholesky factor."""
    test = -G
    test.diagonal().add_(mu * (1.0 - SAFETY))
    return torch.linalg.cholesky_ex(test)[1].item() == 0


GRAM_BLOCKS = 4    # a Gram matrix A^T A is formed as 4 x 4 column blocks, the lower ones only


def gram(A: torch.Tensor, blocks: int = GRAM_BLOCKS) -> torch.Tensor:
    """A^T A (symmetric) from its lower block triangle: (blocks + 1) / (2 blocks) of a GEMM's flops."""
    n = A.shape[1]
    cuts = [n * i // blocks for i in range(blocks + 1)]
    out = torch.zeros(n, n, dtype=A.dtype, device=A.device)
    for a, b in zip(cuts, cuts[1:]):
        out[a:b, :b].addmm_(A[:, a:b].T, A[:, :b])
    return out.tril() + out.tril(-1).T


def gram_of_blocks(parts: list[torch.Tensor]) -> torch.Tensor:
    """A^T A for A = [A_1, ..., A_G] (same rows) without forming A: A_g^T A_h for h < g, mirrored,
    and ``gram`` on the diagonal blocks."""
    cuts = [0]
    for part in parts:
        cuts.append(cuts[-1] + part.shape[1])
    out = torch.empty(cuts[-1], cuts[-1], dtype=parts[0].dtype, device=parts[0].device)
    for g, A in enumerate(parts):
        rows = slice(cuts[g], cuts[g + 1])
        out[rows, rows] = gram(A)
        for h in range(g):
            out[rows, cuts[h]:cuts[h + 1]] = A.T @ parts[h]
            out[cuts[h]:cuts[h + 1], rows] = out[rows, cuts[h]:cuts[h + 1]].T
    return out


def orthonormalised_singular_values(XtX: torch.Tensor, G_J: torch.Tensor) -> torch.Tensor:
    """sigma_i(J V), descending, for V = X L^{-T} (orthonormal columns; X^T X = L L^T), from the two
    Gram matrices X^T X and G_J = (J X)^T (J X): sqrt(eig(L^{-1} G_J L^{-T}))."""
    L = torch.linalg.cholesky(XtX)
    B = torch.linalg.solve_triangular(L, G_J, upper=False)
    B = torch.linalg.solve_triangular(L, B.T, upper=False)                # L^{-1} G_J L^{-T}
    ev = torch.linalg.eigh((B + B.T) / 2)[0].clamp_min(0.0)               # (eigh: faster than eigvalsh)
    return ev.flip(0).sqrt()


def value_columns(sub: AttentionConfig) -> torch.Tensor:
    """Positions, among one group's P_g parameters, of W_V then b_V, in (input a, value f) order
    (b_V as the input a = d): the columns where J_Z^g = (A_h [X, 1]) (x) I_v."""
    offset, cols = 0, []
    for name, shape in _group_shapes(sub):
        size = math.prod(shape)
        if name in ("W_V", "b_V"):
            cols.append(offset + torch.arange(size))
        offset += size
    return torch.cat(cols)


@dataclass(frozen=True)
class SplitBlock:
    """One group's projected block K = (I (x) Pi) J_Z^g (B n, m v, P_g), split by its structure:
    K[:, :, ocols] = Ko (queries and keys, dense) and K[:, (h, c), vcols[(a, f)]] = delta_cf
    Y[:, h, a] (values: Y_h = Pi A_h [X, 1], B n x d', a Kronecker factor)."""

    Ko: torch.Tensor        # (B n, m v, n_o)
    Y: torch.Tensor         # (B n, m, d')
    ocols: torch.Tensor     # positions of Ko's columns among the P_g
    vcols: torch.Tensor     # positions of the value columns, (a, f) order


def split_block(K: torch.Tensor, sub: AttentionConfig) -> SplitBlock:
    """K's query/key columns and its value factor Y (read off K: the columns f = 0, rows c = 0)."""
    rows, _, P_g = K.shape
    m, v = sub.group_size, sub.value_dim
    vcols = value_columns(sub)
    keep = torch.ones(P_g, dtype=torch.bool)
    keep[vcols] = False
    ocols = keep.nonzero().reshape(-1)
    return SplitBlock(Ko=K[:, :, ocols], Y=K.reshape(rows, m, v, P_g)[:, :, 0, vcols[::v]],
                      ocols=ocols, vcols=vcols)


def block_gram(split: SplitBlock) -> torch.Tensor:
    """K^T K from the split block: the value-value block is (sum_h Y_h^T Y_h) (x) I_v and the
    cross block sum_{r, h} Ko[r, (h, f), p] Y_h[r, a]; only the query/key block is a Gram matrix
    of B n m v rows (about 4/9 of K^T K's flops at k = v, m = 1, and 5/8 of that by ``gram``)."""
    Ko, Y, ocols, vcols = split.Ko, split.Y, split.ocols, split.vcols
    rows, m, n_in = Y.shape
    n_o, P_g = ocols.numel(), ocols.numel() + vcols.numel()
    v = vcols.numel() // n_in
    G_oV = torch.einsum("rhfp,rha->paf", Ko.reshape(rows, m, v, n_o), Y).reshape(n_o, n_in * v)
    permuted = torch.cat([torch.cat([gram(Ko.reshape(rows * m * v, n_o)), G_oV], dim=1),
                          torch.cat([G_oV.T, torch.kron(gram(Y.reshape(rows * m, n_in)),
                                                        torch.eye(v, dtype=Y.dtype, device=Y.device))], dim=1)])
    order = torch.cat([ocols, vcols])
    out = torch.empty(P_g, P_g, dtype=Y.dtype, device=Y.device)
    out[order[:, None], order[None, :]] = permuted
    return out


def projected_times(split: SplitBlock, U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """(U^T (x) I) K V for U (m v, j) and V (P_g, r), rows (token, i): the query/key columns by a
    GEMM, the value columns through Y (sum_{h, a} Y[:, h, a] sum_f U[(h, f), i] V[(a, f), :])."""
    Ko, Y, ocols, vcols = split.Ko, split.Y, split.ocols, split.vcols
    rows, m, n_in = Y.shape
    j, r = U.shape[1], V.shape[1]
    v = vcols.numel() // n_in
    out = torch.einsum("rip,ik->rkp", Ko, U).reshape(rows * j, -1) @ V[ocols]
    UV = torch.einsum("hfk,afs->haks", U.reshape(m, v, j), V[vcols].reshape(n_in, v, r))
    out += (Y.reshape(rows, m * n_in) @ UV.reshape(m * n_in, j * r)).reshape(rows * j, r)
    return out


def coupled_directions(hv: int, rows: int, budget: int = 16000) -> int:
    """j: how many of W's smallest singular directions the coupled bound treats exactly.

    ceil(H v / 8), at most H v - 1, and at most ``budget`` / (B n) (the test's Gram matrix has
    order B n j).
    """
    return max(0, min(hv - 1, math.ceil(hv / 8), max(1, budget // rows)))


SAFETY = 1e-6      # relative margin covering float64 rounding in the tests of the coupled bound
GRAM_ROW_BLOCKS = 4  # the coupled test's Gram matrix is formed as 4 x 4 blocks, the lower ones
CERTIFY_TRIES = 8  # float64 tests of the coupled bound, from the float32 search's lam down by 2^(1/4)


@dataclass(frozen=True)
class FactoredRows:
    """T_g Sigma_g = (U_g^T (x) I) E kept as its factors: E = K_g V_g (B n m v x r_g, rows
    (token, a)) and U_g (m v x j), W's j directions on group g's rows.  Smaller than the product
    when m v < j (one key/value head per group of many heads: d = 128, H = 16 has m v = 8, j = 16)."""

    E: torch.Tensor
    U: torch.Tensor

    def to(self, dtype: torch.dtype) -> "FactoredRows":
        return FactoredRows(self.E.to(dtype), self.U.to(dtype))


def factored_is_cheaper(rows: int, mv: int, j: int, r: int) -> bool:
    """True when the coupled test costs fewer flops per group with ``FactoredRows``:
    r^2 B n m v + (5/4) (B n m v)^2 r + 2 (B n)^2 m v j (m v + j) (solve, E E^T, the sandwich)
    against r^2 B n j + (5/4) (B n j)^2 r (solve, Y Y^T)."""
    direct = r * r * rows * j + 1.25 * (rows * j) ** 2 * r
    factored = r * r * rows * mv + 1.25 * (rows * mv) ** 2 * r + 2 * rows * rows * mv * j * (mv + j)
    return factored < direct


def _add_factored_gram(out: torch.Tensor, rows_of: FactoredRows, C: torch.Tensor,
                       w: torch.Tensor, rows: int) -> None:
    """out += Y Y^T for Y = Delta^{1/2} (U^T (x) I) E C^{-T}, through F = (E C^{-T}) (E C^{-T})^T
    (order B n m v) and the sandwich (Omega^T (x) I) F (Omega (x) I), Omega = U Delta^{1/2}."""
    mv, j = rows_of.U.shape
    E = torch.linalg.solve_triangular(C, rows_of.E.T, upper=False)        # (r_g, Bn mv)
    F = gram(E)                                                           # (Bn mv, Bn mv)
    omega = rows_of.U * w[None, :]
    right = (F.reshape(rows * mv * rows, mv) @ omega).reshape(rows, mv, rows * j)
    del F
    out.view(rows, j, rows * j).baddbmm_(omega.T.expand(rows, j, mv), right)


def _coupled_test(blocks, lam: float, alpha: float, delta: torch.Tensor, rows: int,
                  s: float) -> bool:
    """True if alpha Sigma^2 - lam N - (T Sigma)^T Delta (T Sigma) >= 0 (see the module docstring).

    N_g = I + c ||W||^2 V_g^T M_g^T M_g V_g, c = 1 / (1 - lam / s^2); per group a Cholesky
    factor C_g C_g^T = alpha Sigma_g^2 - lam N_g (PD, else False), then
    ||Delta^{1/2} [T_1 Sigma_1 C_1^{-T}, ..., T_G Sigma_G C_G^{-T}]||^2 <= 1.
    """
    c = 1.0 / (1.0 - lam / (s * s))
    factors = []
    for S, _, ML in blocks:                 # all Cholesky factors first: a failure is cheap
        A = torch.diag(alpha * S * S - lam - SAFETY * alpha * S[0].item() ** 2) - (lam * c) * ML
        C, info = torch.linalg.cholesky_ex(A)
        if info.item() != 0:
            return False
        factors.append(C)
    if not delta.numel():
        return True
    w = delta.sqrt().repeat(rows)[:, None].to(factors[0].dtype)
    q = w.shape[0]
    cuts = [q * i // GRAM_ROW_BLOCKS for i in range(GRAM_ROW_BLOCKS + 1)]
    product = torch.zeros(q, q, dtype=w.dtype, device=w.device)
    for (_, TS, _), C in zip(blocks, factors):
        if isinstance(TS, FactoredRows):
            _add_factored_gram(product, TS, C, delta.sqrt().to(C.dtype), rows)
            continue
        Y = torch.linalg.solve_triangular(C, TS.T, upper=False).T * w      # (rows j, r_g)
        for a, b in zip(cuts, cuts[1:]):          # the lower triangle only (5/8 of the flops)
            product[a:b, :b].addmm_(Y[a:b], Y[:b].T)
    product.neg_().diagonal().add_(1.0 - SAFETY)   # (1 - SAFETY) I - Y Y^T: PD iff it passes
    return torch.linalg.cholesky_ex(product)[1].item() == 0      # reads the lower triangle only


def coupled_lower_bound(blocks, s_W: torch.Tensor, j: int, rows: int, s: float) -> float:
    """sqrt(lam) for lam on the grid lam_top 4^(-i) 2^(-k/4) (i >= 1, 0 <= k < 8), certified by
    ``_coupled_test`` in float64.

    The grid is searched with the same test in float32 (half the cost; it only chooses lam):
    the first lam_top 4^(-i) that passes, refined by factors 2, 2^(1/2) and 2^(1/4).  That lam is
    then tested in float64, the only test that counts, and lowered by 2^(1/4) until it passes (at
    most ``CERTIFY_TRIES`` times; else 0).  ``s_W`` W's singular values ascending; alpha =
    sigma_{j+1}(W)^2, Delta_i = alpha - sigma_i^2 (i <= j); lam_top = min(s^2 / 2, alpha min_g
    sigma_{r_g}(K_g)^2) (beyond it the test fails).
    """
    alpha = s_W[j].item() ** 2
    delta = (alpha - s_W[:j] ** 2).clamp_min(0.0)
    lam_top = min(s * s / 2, alpha * min(S[-1].item() for S, _, _ in blocks) ** 2)
    screen = [(S.float(), TS.to(torch.float32), ML.float()) for S, TS, ML in blocks]
    lo = 0.0
    for i in range(1, 31):
        if _coupled_test(screen, lam_top * 4.0 ** -i, alpha, delta, rows, s):
            lo = lam_top * 4.0 ** -i
            break
    if lo == 0.0:
        return 0.0
    for step in (2.0, 2.0 ** 0.5, 2.0 ** 0.25):      # refine within the factor 4
        if _coupled_test(screen, lo * step, alpha, delta, rows, s):
            lo *= step
    del screen
    for _ in range(CERTIFY_TRIES):
        if _coupled_test(blocks, lo, alpha, delta, rows, s):
            return math.sqrt(lo)
        lo /= 2.0 ** 0.25
    return 0.0


def structured_rank(config: AttentionConfig, params: Params, X: torch.Tensor,
                    frequencies: torch.Tensor | None = None, chunk: int = 256) -> StructuredRank:
    """Rank of d vec(forward(X)) / d theta with a certified gap, without forming the Jacobian.

    See the module docstring for the method and the proof of the two bounds.
    """
    rule = applicable(config)
    if rule is not None:
        raise StructureError(rule)
    d, H, G, m, v = config.d_model, config.n_heads, config.n_kv_heads, config.group_size, config.value_dim
    B, n = X.shape[0], X.shape[1]
    P = n_params(config)
    theta = flatten(params).detach()
    params = unflatten(config, theta)
    sub = group_config(config)

    # Z' = [Z, 1] = Q R, and W = stacked W_O (Hv x d)
    with torch.no_grad():
        Z = head_outputs(config, params, X, frequencies)                  # (B, H, n, v)
    Zmat = Z.permute(0, 2, 1, 3).reshape(B * n, H * v)
    if config.has_bias("o"):
        Zmat = torch.cat([Zmat, torch.ones(B * n, 1, dtype=torch.float64, device=Zmat.device)], dim=1)
    c = Zmat.shape[1]
    if c > B * n:
        raise StructureError(f"B * n = {B * n} rows must be at least the {c} columns of Z'")
    Qz, Rz = torch.linalg.qr(Zmat)
    s_Z = torch.linalg.svdvals(Rz)
    W = params["W_O"].reshape(H * v, d)
    s_W = torch.linalg.svdvals(W)
    with torch.no_grad():   # guard: the layer's output must be Z' W' (no other path to the output)
        out = forward(config, params, X, frequencies).reshape(B * n, d)
        Wp = torch.cat([W, params["b_O"][None]]) if config.has_bias("o") else W
        if not torch.allclose(Zmat @ Wp, out, rtol=1e-12, atol=1e-12 * out.abs().max().item()):
            raise StructureError("the layer's output is not (head outputs) @ W_O + b_O")

    ranks, gaps, kernels, sig_r, norm_M, norm_L, norm_JZ = [], [], [], [], [], [], []
    u = 0
    kernel_grams, lifted_outputs, lifted_images = [], [], []          # the parts of x, and J x
    # the coupled bound (module docstring): W's j smallest left singular directions U_j
    U_W, s_W_all, _ = torch.linalg.svd(W, full_matrices=False)          # descending
    j = coupled_directions(H * v, B * n)
    U_j = U_W[:, H * v - j:].flip(1)                                  # (Hv, j), ascending sigma
    blocks = []                                                        # per group: (Sigma_g, T Sigma_g, N_g)
    seconds = {"blocks": 0.0, "block_svd": 0.0}
    for g in range(G):
        idx = group_parameter_index(config, g)
        theta_g = theta[idx]

        def f_g(t: torch.Tensor) -> torch.Tensor:
            return head_outputs(sub, _group_params(sub, t), X, frequencies)   # (B, m, n, v)

        with torch.no_grad():   # guard: group g's heads depend on group g's parameters only
            if not torch.allclose(f_g(theta_g), Z[:, g * m:(g + 1) * m], rtol=1e-12, atol=1e-13):
                raise StructureError(f"heads of key/value group {g} are not a function of the "
                                     "group's own parameters")
        t0 = time.perf_counter()
        if variants.supports(sub, "closed_blocks"):                     # (B, m, n, v, P_g)
            T = _group_jacobian_closed(sub, theta_g, X, frequencies)
        else:                           # query/key norms without parameters: forward mode
            T = _group_jacobian(sub, theta_g, X, frequencies, chunk)
        seconds["blocks"] += time.perf_counter() - t0
        T = T.permute(0, 2, 1, 3, 4).reshape(B * n, m * v, -1)           # (Bn, mv, P_g)
        M = torch.einsum("rc,rjp->cjp", Qz, T)                           # Q^T delta Z
        K = T - torch.einsum("rc,cjp->rjp", Qz, M)                       # Pi delta Z
        Kmat = K.reshape(-1, K.shape[-1])
        norm_M.append(_norm2(M.reshape(-1, M.shape[-1])))
        Lg = torch.linalg.solve_triangular(Rz, M.reshape(c, -1), upper=True)   # R^{-1} Q^T delta Z
        norm_L.append(_norm2(Lg.reshape(-1, M.shape[-1])))
        t0 = time.perf_counter()
        # K_g^T K_g = V diag(lambda) V^T (GEMM, then a symmetric eigensolver: ~6x faster than
        # QR + SVD); the cut is taken on lambda with the Gram matrix's own round-off tolerance
        # lambda_1 max(rows, P_g) eps, so sigma_i = sqrt(lambda_i) is trusted down to ~1e-6 sigma_1
        split = split_block(K, sub)
        G_K = block_gram(split)
        lam, Vg = torch.linalg.eigh(G_K)
        lam, Vh = lam.flip(0).clamp_min(0.0), Vg.flip(1).T                # descending
        S = lam.sqrt()
        # (K = T - Q Q^T T is round-off up to the size of T, not of K: the cut's scale is
        # ||T||^2 <= ||Q^T T||^2 + ||K||^2; at B n = c rows Pi = 0 and every K_g is round-off)
        r_g, gap_g = rank_from_singular_values(lam, (K.shape[0] * K.shape[1], K.shape[2]),
                                               scale=norm_M[-1] ** 2 + lam[0].item())
        gap_g = math.sqrt(gap_g)
        seconds["block_svd"] += time.perf_counter() - t0
        if r_g:
            Vs = Vh[:r_g].T                                              # (P_g, r_g)
            Uj_g = U_j[g * m * v:(g + 1) * m * v]                        # (mv, j)
            if factored_is_cheaper(B * n, m * v, j, r_g):
                TS = FactoredRows(projected_times(split, torch.eye(m * v, dtype=torch.float64, device=Vs.device), Vs), Uj_g)
            else:
                TS = projected_times(split, Uj_g, Vs)                     # (Bn j, r_g)
            MV = Lg.reshape(-1, K.shape[-1]) @ Vs                        # R^{-1} Q^T delta Z V_S
            blocks.append((S[:r_g].clone(), TS, s_W_all[0].item() ** 2 * (MV.T @ MV)))
            del MV
        del Lg
        norm_JZ.append(math.hypot(norm_M[-1], S[0].item() if S.numel() else 0.0))
        ranks.append(r_g)
        gaps.append(gap_g)
        if r_g > 0:
            sig_r.append(S[r_g - 1].item())
        N = Vh[r_g:].T                                                   # (P_g, u_g) kernel of K_g
        u_g = N.shape[1]
        if u_g and r_g:     # one refinement step on K itself (the Gram's eigenvectors are off by
            # ~eps lambda_1 / lambda_r): remove the row-space part least squares sees in K N
            N = N - Vs @ ((Vs.T @ (Kmat.T @ (Kmat @ N))) / lam[:r_g, None])
            N = torch.linalg.qr(N)[0]
        if u_g:
            # lift: delta W' = -R^{-1} Q^T delta Z(N) W, delta Z(N) only in group g's columns
            MN = torch.einsum("cjp,pk->cjk", M, N)                       # (c, mv, u_g)
            Wg = W[g * m * v:(g + 1) * m * v]                            # (mv, d)
            QdZW = torch.einsum("cjk,jd->cdk", MN, Wg).reshape(c, -1)    # (c, d * u_g)
            dW = -torch.linalg.solve_triangular(Rz, QdZW, upper=True).reshape(c, d, u_g)
            kernel_grams.append(N.T @ N)                                 # x = (N on idx, dW on W')
            lifted_outputs.append(dW.reshape(c * d, u_g))
            lifted_images.append(lifted_image(T, N, Wg, Zmat, dW))
        u += u_g
        del T, M, K, Kmat, Vh, G_K, split

    rank = P - u
    s_min_W = s_W.min().item() if H * v <= d else 0.0
    a = s_min_W * (min(sig_r) if sig_r else math.inf)
    b = s_W.max().item() * max(norm_M)
    s = s_Z.min().item()
    norm_Wg = [torch.linalg.matrix_norm(W[g * m * v:(g + 1) * m * v], ord=2).item() for g in range(G)]
    ell = min(s_W.max().item() * max(norm_L), math.hypot(*(x * y for x, y in zip(norm_L, norm_Wg))))
    if math.isinf(a):           # every K_g is zero: S = output parameters only
        uncoupled = s
    elif a > 0 and s > 0:       # 1 / sqrt((1 + ell^2) / a^2 + 1 / s^2), see the module docstring
        uncoupled = 1.0 / math.sqrt((1.0 + ell * ell) / (a * a) + 1.0 / (s * s))
    else:
        uncoupled = 0.0
    tau = roundoff_tolerance(math.hypot(s_W.max().item() * max(norm_JZ), s_Z.max().item()),
                             (B * n * d, P))
    t0 = time.perf_counter()
    if u:
        # V = X R_X^{-1} orthonormal (X^T X = R_X^T R_X), so the squared singular values of J V
        # are the eigenvalues of R_X^{-T} (J X)^T (J X) R_X^{-1}: two Gram matrices of order u
        # (the parts of X lie on disjoint rows -- N_g on group g's, all dW on W' -- so X^T X =
        # blockdiag(N_g^T N_g) + D^T D, D = [dW_1, ..., dW_G]; X itself is never formed)
        XtX = gram_of_blocks(lifted_outputs) + torch.block_diag(*kernel_grams)
        lifted_outputs.clear()
        kernel_sv = orthonormalised_singular_values(XtX, gram_of_blocks(lifted_images))
        lifted_images.clear()
        sigma_next = kernel_sv.max().item()
    else:
        kernel_sv = torch.zeros(0, dtype=torch.float64)
        sigma_next = 0.0
    seconds["upper_bound"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    coupled = coupled_lower_bound(blocks, s_W_all.flip(0), j, B * n, s) if blocks else 0.0
    seconds["coupled_bound"] = time.perf_counter() - t0
    sigma_r_lower = max(uncoupled, coupled)
    gap = sigma_r_lower / max(sigma_next, tau)
    factors = {"a": a, "b": b, "s": s, "coupled": coupled, "uncoupled": uncoupled, "j": j,
               "seconds": seconds, "sigma_min_W": s_min_W, "sigma_max_W": s_W.max().item(),
               "sigma_min_Z": s, "sigma_max_Z": s_Z.max().item(),
               "min_block_sigma_r": min(sig_r) if sig_r else math.inf,
               "max_norm_QtJZ": max(norm_M), "ell": ell, "tolerance_upper": tau}
    return StructuredRank(rank=rank, n_params=P, n_rows=B * n * d, gap=gap,
                          sigma_r_lower=sigma_r_lower, sigma_next_upper=sigma_next,
                          kernel_singular_values=kernel_sv, block_ranks=tuple(ranks),
                          block_gaps=tuple(gaps), factors=factors)
