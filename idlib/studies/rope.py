"""Helpers for chapters 4 (RoPE) and 5 (grouped K/V heads).

* Group actions with one matrix per head (``act_qk``, ``act_vo``), so a chapter can apply the
  symmetry of its theorem, or deliberately break it, on real tensors; ``output_change`` says
  by how much the layer's output moved.
* Random group elements: ``random_gl`` (all of GL(k)) and ``random_commutant`` (the matrices
  that commute with a rotation, via ``idlib.symmetry.commutant_basis``).
* Short sequences: ``softmax_budget`` (how many numbers per sequence carry the QK parameters
  to the output), ``adequate_n_sequences`` (enough sequences for a given length) and
  ``short_causal_bounds`` (the QK fiber of a causal two-token sequence, chapter 4).
* ``separation`` (how far a frequency vector is from a coincidence), ``gap_decade`` and
  ``rank_text`` (a measured rank as text that does not change with the BLAS thread count).
"""
from __future__ import annotations

import cmath
import math

import torch

from ..attention import DTYPE, Params, forward
from ..config import AttentionConfig
from ..rank import RankMeasurement, default_n_sequences, format_gap as gap_decade, softmax_budget
from ..symmetry import commutant_basis


def rank_text(m: RankMeasurement) -> str:
    """'rank r of P (gap 1e6-1e7, certified)', stable from one run to the next."""
    status = "certified" if m.certified else "not certified"
    return f"rank {m.rank} of {m.n_params} (gap {gap_decade(m.gap)}, {status})"


def random_gl(k: int, seed: int, scale: float = 0.5) -> torch.Tensor:
    """A generic invertible k x k matrix near the identity: I + scale * N(0, 1) / sqrt(k)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.eye(k, dtype=DTYPE) + scale * torch.randn(k, k, generator=gen, dtype=DTYPE) / math.sqrt(k)


def random_commutant(R: torch.Tensor, seed: int, scale: float = 0.5) -> torch.Tensor:
    """exp(scale / sqrt(k) Pi(G)), G a seeded k x k Gaussian and Pi the orthogonal projector
    onto the commutant {E : E R = R E}.

    Pi(G) has the law of sum_i c_i E_i (c_i ~ N(0, 1), E_i an orthonormal basis), but does not
    depend on which basis the SVD returns (that choice changes with the CPU), so the same seed
    gives the same matrix everywhere.  The exponential of an element of the commutant algebra
    commutes with R and is invertible.
    """
    k = R.shape[0]
    basis = commutant_basis(R).reshape(-1, k * k)             # orthonormal rows
    gen = torch.Generator().manual_seed(seed)
    G = torch.randn(k * k, generator=gen, dtype=DTYPE)
    E = (basis.T @ (basis @ G)).reshape(k, k)
    return torch.linalg.matrix_exp(scale * E / math.sqrt(k))


def act_qk(config: AttentionConfig, params: Params, A_heads: list[torch.Tensor],
           A_keys: list[torch.Tensor]) -> Params:
    """W_Q^h -> W_Q^h A_heads[h], W_K^g -> W_K^g A_keys[g]^{-T} (and b_Q, b_K alike).

    The theorem's symmetry is A_heads[h] = A_keys[g(h)]; other choices break it.
    """
    p = dict(params)
    p["W_Q"] = torch.stack([params["W_Q"][h] @ A_heads[h] for h in range(config.n_heads)])
    inv_T = [torch.linalg.inv(A).T for A in A_keys]
    p["W_K"] = torch.stack([params["W_K"][g] @ inv_T[g] for g in range(config.n_kv_heads)])
    if "b_Q" in p:
        p["b_Q"] = torch.stack([params["b_Q"][h] @ A_heads[h] for h in range(config.n_heads)])
    if "b_K" in p:
        p["b_K"] = torch.stack([params["b_K"][g] @ inv_T[g] for g in range(config.n_kv_heads)])
    return p


def act_vo(config: AttentionConfig, params: Params, B_values: list[torch.Tensor],
           B_heads: list[torch.Tensor]) -> Params:
    """W_V^g -> W_V^g B_values[g] (and b_V), W_O^h -> B_heads[h]^{-1} W_O^h."""
    p = dict(params)
    p["W_V"] = torch.stack([params["W_V"][g] @ B_values[g] for g in range(config.n_kv_heads)])
    p["W_O"] = torch.stack([torch.linalg.solve(B_heads[h], params["W_O"][h])
                            for h in range(config.n_heads)])
    if "b_V" in p:
        p["b_V"] = torch.stack([params["b_V"][g] @ B_values[g] for g in range(config.n_kv_heads)])
    return p


def output_change(config: AttentionConfig, before: Params, after: Params, X: torch.Tensor,
                  frequencies: torch.Tensor | None = None) -> float:
    """max |f(after) - f(before)| / max |f(before)| over the inputs X."""
    y0 = forward(config, before, X, frequencies)
    y1 = forward(config, after, X, frequencies)
    return ((y1 - y0).abs().max() / y0.abs().max()).item()


def adequate_n_sequences(config: AttentionConfig, seq_len: int) -> int:
    """Sequences that make full rank possible at ``seq_len`` (``rank.default_n_sequences``)."""
    return default_n_sequences(config, seq_len)


def short_causal_bounds(d_model: int, head_dim: int, commutant_dim: int) -> tuple[int, int]:
    """Bounds on the QK fiber of one head seen only through causal two-token sequences.

    With s = max(0, 2k - d) (the dimension of col W_Q intersected with col W_K) and
    c = commutant_dim: max(c, s(s-1)/2) <= fiber <= c + s(s-1)/2 (chapter 4).
    """
    s = max(0, 2 * head_dim - d_model)
    anti = s * (s - 1) // 2
    return max(commutant_dim, anti), commutant_dim + anti


def separation(frequencies: torch.Tensor | list[float]) -> float:
    """Distance of the offset-1 eigenvalues z_i = e^{i theta_i} from a coincidence:
    min over i < j of |z_i - z_j|, |z_i - conj z_j|, and over i of |z_i - 1|, |z_i + 1|."""
    z = [cmath.exp(1j * float(t)) for t in frequencies]
    gaps = [abs(w - 1) for w in z] + [abs(w + 1) for w in z]
    gaps += [abs(a - b) for i, a in enumerate(z) for b in z[i + 1:]]
    gaps += [abs(a - b.conjugate()) for i, a in enumerate(z) for b in z[i + 1:]]
    return min(gaps)
