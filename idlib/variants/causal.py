"""The causal mask: query i sees keys j <= i.

Forward: scores above the diagonal set to -inf before the softmax.  Count: unchanged (every
symmetry acts token by token); with d + 2 tokens per sequence the count is reached (chapter 4
measures shorter causal sequences, which can leave directions unseen).
"""
from __future__ import annotations

from ..lazy import torch

from ..fields import boolean
from .base import Flow, Variant


def future(n: int, device: torch.device | None = None) -> torch.Tensor:
    """(n, n) True above the diagonal: the keys a query may not see."""
    return torch.ones(n, n, dtype=torch.bool, device=device).triu(1)


def mask(flow: Flow) -> None:
    n = flow.scores.shape[-1]
    flow.scores = flow.scores.masked_fill(future(n, flow.scores.device), float("-inf"))


ROW = Variant(
    name="causal",
    summary="causal mask: each query sees the keys at or before its position",
    fields={"causal": boolean},
    active=lambda config: config.causal,
    forward={"mask": mask},
    capabilities=frozenset({"structured", "closed_blocks", "block", "symmetry", "permute_heads", "twin", "sdpa",
                            "conservation"}),
    text=lambda config: "causal", chapter="chapters 2, 4")
