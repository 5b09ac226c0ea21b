"""Centred inputs: the layer sees x - mean(x) (a LayerNorm without affine in front).

Count (chapter 7): the all-ones components of W_Q, W_K, W_V (of W_DKV with a latent) are
invisible; the rest is a layer with input width d_in = d - 1.
"""
from __future__ import annotations

from ..fields import ConfigError, boolean
from .base import Flow, Tally, Variant, center


def relations(config) -> None:
    if config.input_centered and config.d_model < 2:
        raise ConfigError(f"input_centered=True needs d_model >= 2 (got {config.d_model}: "
                          "a centred 1-dim input is always zero)")


def refuse(config) -> str | None:
    if config.n_layers > 1:
        return ("input_centered=True with n_layers > 1 is not derived (only the "
                "first layer of a residual stack sees centred inputs)")
    return None


def inputs(flow: Flow) -> None:
    flow.X = center(flow.X)


def fibers(t: Tally) -> None:
    c = t.config
    L, R, H, G, k, v = c.n_layers, c.n_kv_sets, c.n_heads, c.n_kv_heads, c.head_dim, c.value_dim
    latent = c.kv_latent is not None
    t.qk_ones = L * H * k + (0 if latent else R * G * k)
    t.vo_ones = 0 if latent else R * G * v


ROW = Variant(
    name="centred",
    summary="inputs centred over the features (a LayerNorm without affine in front)",
    fields={"input_centered": boolean},
    active=lambda config: config.input_centered,
    forward={"inputs": inputs},
    count={"fibers": fibers},
    relations=relations, refuse=refuse,
    capabilities=frozenset({"structured", "closed_blocks", "symmetry", "permute_heads", "twin", "sdpa"}),
    text=lambda config: "centred", chapter="chapter 7")
