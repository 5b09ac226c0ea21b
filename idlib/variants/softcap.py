"""Logit soft-capping: scores S -> c tanh(S / c) before the mask (Gemma 2, ``softcap`` = c).

Count (chapter 9, Theorem "Capped count"): the cap sees row constants, so the key bias is
identified (its dims fixed by every rotation are no longer unidentified); nothing else changes.
"""
from __future__ import annotations

from ..lazy import torch

from ..fields import optional_positive
from .base import Flow, Tally, Variant


def refuse(config) -> str | None:
    k, d_in = config.head_dim, config.input_dim
    if config.has_bias("k") and k > d_in:
        return (f"softcap with a key bias needs head_dim={k} at most the input dimension "
                f"{d_in} (the count for a wider capped head is not derived)")
    return None


def cap(flow: Flow) -> None:
    c = flow.config.softcap
    flow.scores = c * torch.tanh(flow.scores / c)


def fibers(t: Tally) -> None:
    t.k_bias = 0                     # capped scores see row constants: the key bias is identified


ROW = Variant(
    name="softcap",
    summary="logit soft-capping, scores -> c tanh(scores / c) (Gemma 2)",
    fields={"softcap": optional_positive},
    active=lambda config: config.softcap is not None,
    forward={"transform": cap},
    count={"fibers": fibers},
    refuse=refuse, forgives_row_constants=False,
    capabilities=frozenset({"symmetry", "permute_heads", "twin", "conservation"}),
    text=lambda config: f"cap={config.softcap:g}", chapter="chapter 9")
