"""The measurement: rank of the Jacobian of the layer's outputs with respect to all parameters.

J[(sequence, token, feature), parameter] at generic parameters and inputs; its rank is the
functional dimension.  A rank is only a fact with its gap sigma_r / sigma_{r+1}: the cut is
``certified`` when that gap is at least ``CERTIFY_GAP``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .attention import flatten, forward, init_params, n_params, random_inputs, unflatten, Params
from .config import AttentionConfig

CERTIFY_GAP = 1e6


def default_seq_len(config: AttentionConfig) -> int:
    """Tokens per sequence: d_model + 2, so that one query's keys span the input space.

    Shorter causal sequences can leave directions unseen (chapter 4 measures how many).
    """
    return config.d_model + 2


@dataclass(frozen=True)
class RankMeasurement:
    rank: int
    n_params: int
    n_rows: int
    singular_values: torch.Tensor
    gap: float
    certified: bool

    @property
    def unidentified(self) -> int:
        """n_params - rank (only meaningful when certified)."""
        return self.n_params - self.rank

    def describe(self) -> str:
        status = "certified" if self.certified else "NOT certified"
        return (f"rank {self.rank} of {self.n_params} (gap {self.gap:.3e}, {status})")


def jacobian(config: AttentionConfig, params: Params, X: torch.Tensor,
             frequencies: torch.Tensor | None = None, chunk: int = 64) -> torch.Tensor:
    """d vec(forward(X)) / d theta, shape (B * n * d_model, n_params).

    Each sequence's outputs depend on that sequence alone, so the Jacobian is taken one sequence
    at a time (reverse mode, n * d_model rows each) and vmapped over ``chunk`` sequences.
    """
    theta = flatten(params).detach()

    def f(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return forward(config, unflatten(config, t), x[None], frequencies).reshape(-1)

    per_sequence = torch.func.vmap(torch.func.jacrev(f), in_dims=(None, 0))
    blocks = [per_sequence(theta, X[i:i + chunk]) for i in range(0, X.shape[0], chunk)]
    return torch.cat(blocks).reshape(-1, theta.numel())


def rank_from_singular_values(sv: torch.Tensor, shape: tuple[int, int]) -> tuple[int, float]:
    """(rank, gap): rank counts sigma > sigma_max * max(shape) * eps; gap = sigma_r / sigma_{r+1}."""
    sv = sv.sort(descending=True).values
    if sv.numel() == 0 or sv[0] == 0:
        return 0, math.inf
    tol = sv[0].item() * max(shape) * torch.finfo(sv.dtype).eps
    rank = int((sv > tol).sum())
    if rank == 0:
        return 0, math.inf
    if rank == sv.numel():
        return rank, math.inf
    below = sv[rank].item()
    return rank, (sv[rank - 1].item() / below) if below > 0 else math.inf


def default_n_sequences(config: AttentionConfig, seq_len: int, oversample: float = 1.25) -> int:
    """Enough sequences for full rank to be possible, with a margin ``oversample``.

    Two bounds: rows B n d at least n_params; and, since one head's attention pattern reaches
    the output only through its min(v, d) value directions, B n min(v, d) at least the
    2 d (k + v) parameters of one head.
    """
    d, k, v = config.d_model, config.head_dim, config.value_dim
    rows_bound = n_params(config) / (seq_len * d)
    head_bound = 2 * d * (k + v) / (seq_len * min(v, d))
    return math.ceil(oversample * max(rows_bound, head_bound)) + 1


def measure(config: AttentionConfig, seed: int = 0, seq_len: int | None = None,
            n_sequences: int | None = None, params: Params | None = None,
            frequencies: torch.Tensor | None = None) -> RankMeasurement:
    """Jacobian rank at seeded generic parameters on seeded Gaussian inputs (float64)."""
    params = init_params(config, seed) if params is None else params
    seq_len = default_seq_len(config) if seq_len is None else seq_len
    n_sequences = default_n_sequences(config, seq_len) if n_sequences is None else n_sequences
    X = random_inputs(config, n_sequences, seq_len, seed)
    J = jacobian(config, params, X, frequencies)
    sv = torch.linalg.svdvals(J)
    rank, gap = rank_from_singular_values(sv, tuple(J.shape))
    return RankMeasurement(rank=rank, n_params=J.shape[1], n_rows=J.shape[0],
                           singular_values=sv, gap=gap, certified=gap >= CERTIFY_GAP)
