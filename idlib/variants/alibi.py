"""ALiBi: a fixed linear bias on the scores, -m_h (i - j) for query i and key j (BLOOM, MPT,
Falcon-RW), with BLOOM's head slopes m_h (a geometric sequence, ``alibi_slopes``).

Nothing is learned and no parameter is added.  Count (chapter 10, Theorem "ALiBi count"): every
symmetry of the layer without ALiBi keeps the scores Q_h K_h^T (or changes a row by a constant)
and so keeps the biased scores too; for slopes outside a set of measure zero in R^H the
Jacobian rank is that of the layer without ALiBi, so the count is unchanged.  The slopes follow
the head index: relabelling the query heads is no longer a symmetry.
"""
from __future__ import annotations

import math

from ..lazy import torch

from ..fields import boolean
from .base import Flow, Variant


def alibi_slopes(n_heads: int) -> list[float]:
    """BLOOM's slopes: with p = 2^floor(log2 H), m_h = 2^(-8h/p) for h = 1..p,
    then (when H > p) 2^(-4h/p) for h = 1, 3, 5, .. (the odd powers of the next
    schedule)."""
    p = 2 ** math.floor(math.log2(n_heads))
    slopes = [2.0 ** (-8.0 * h / p) for h in range(1, p + 1)]
    extra = min(p, n_heads - p)
    slopes += [2.0 ** (-4.0 * h / p) for h in range(1, 2 * extra, 2)]
    return slopes


def bias_matrix(n_heads: int, n: int) -> torch.Tensor:
    """(H, n, n): -m_h (i - j) at query i, key j."""
    pos = torch.arange(n, dtype=torch.float64)
    m = torch.tensor(alibi_slopes(n_heads), dtype=torch.float64)
    return m[:, None, None] * (pos[None, :] - pos[:, None])[None]


def add_bias(flow: Flow) -> None:
    bias = bias_matrix(flow.config.n_heads, flow.scores.shape[-1])
    flow.scores = flow.scores + bias.to(flow.scores.device)


ROW = Variant(
    name="alibi",
    summary="ALiBi: fixed per-head linear position biases on the scores, "
            "-m_h (i - j)",
    fields={"alibi": boolean},
    active=lambda config: config.alibi,
    forward={"transform": add_bias},
    capabilities=frozenset({"symmetry", "twin", "sdpa"}),
    text=lambda config: "ALiBi", chapter="chapter 10")
