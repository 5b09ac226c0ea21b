"""A stack of n_layers residual layers x <- x + attn_l(x), each run of kv_share consecutive layers
sharing one set of key/value projections (cross-layer attention).

Parameters get a leading axis: per layer (W_Q, W_O, b_Q, g_Q) or per key/value set (W_K, W_V,
b_K, g_K); ``idlib.attention.forward`` runs the layers in turn.  Count (chapter 7): the S layers
of a run share the group's GL(k), GL(v): the single-layer fibers with m replaced by S m, once per
set (a conjecture beyond the proved lower bound, chapter 7).
"""
from __future__ import annotations

from ..fields import ConfigError, integer
from .base import Tally, Variant


def relations(config) -> None:
    if config.n_layers % config.kv_share:
        raise ConfigError(f"kv_share={config.kv_share} must divide n_layers={config.n_layers}")


def widths(t: Tally) -> None:
    t.mm *= t.config.kv_share


ROW = Variant(
    name="stack",
    summary="a residual stack of L layers, K/V shared across runs of S layers",
    fields={"n_layers": integer, "kv_share": integer},
    active=lambda config: config.n_layers > 1,
    count={"widths": widths},
    relations=relations,
    capabilities=frozenset({"symmetry", "permute_heads", "twin", "sdpa"}),
    text=lambda config: f"L={config.n_layers} S={config.kv_share}", chapter="chapter 7")
