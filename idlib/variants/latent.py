"""Latent keys and values: K_g = Lat W_UK[g], V_g = Lat W_UV[g] from a shared C-dim latent.

Lat = X W_DKV (d x C), RMS-normalised when ``latent_norm``; the key and value biases are added
after the up projections.  Count (chapter 7, ``latent_fiber``): GL(C) on the latent when C is a
true bottleneck (C < min(d_in, G (k + v))); otherwise the fiber of the factorisation of d_in x
G (k + v) through C; with ``latent_norm`` O(C) and one scale.  The key/value projections then
read b = C (or d_in) dims.
"""
from __future__ import annotations

from ..lazy import torch

from ..fibers import latent_fiber
from ..fields import ConfigError, boolean, optional_integer
from .base import Flow, Tally, Variant, rms_norm


def shapes(config) -> dict[str, tuple[int, ...]]:
    d, G, k, v, C = config.d_model, config.n_kv_heads, config.head_dim, config.value_dim, config.kv_latent
    return {"W_DKV": (d, C), "W_UK": (G, C, k), "W_UV": (G, C, v)}


def axes(config) -> dict[str, tuple[str | None, str | None]]:
    return {"W_DKV": (None, None), "W_UK": (None, "group"), "W_UV": (None, "group")}


def relations(config) -> None:
    if config.latent_norm and config.kv_latent is None:
        raise ConfigError("latent_norm=True needs kv_latent (there is no latent to normalise)")
    if config.n_layers > 1 and config.kv_latent is not None:   # param_shapes has no stacked latent
        raise ConfigError("kv_latent with n_layers > 1 is not derived (use one layer)")


def refuse(config) -> str | None:
    C, d_in = config.kv_latent, config.input_dim
    if config.latent_norm and not (2 <= C <= d_in):
        return (f"latent_norm=True needs 2 <= kv_latent <= {d_in} (the input dimension; got "
                f"kv_latent={C}): the count for other latent widths is not derived")
    return None


def keys_values(flow: Flow) -> None:
    p = flow.params
    lat = flow.X @ p["W_DKV"]                                      # (B, n, C)
    if flow.config.latent_norm:
        lat = rms_norm(lat)
    flow.k = torch.einsum("bnc,gck->bgnk", lat, p["W_UK"])
    flow.v = torch.einsum("bnc,gcv->bgnv", lat, p["W_UV"])


def widths(t: Tally) -> None:
    c = t.config
    t.b, t.lat_fiber, t.lat_extra = latent_fiber(t.d_in, c.kv_latent, c.n_kv_heads * (c.head_dim + c.value_dim),
                                                 c.latent_norm)
    t.kv_in = c.kv_latent


def components(t: Tally) -> None:
    c = t.config
    centred = 1 if c.input_centered else 0
    t.components.append(("latent", c.d_model * c.kv_latent, t.lat_fiber + centred * c.kv_latent))


ROW = Variant(
    name="latent",
    summary="keys and values read from a shared C-dim latent (multi-head latent attention)",
    fields={"kv_latent": optional_integer, "latent_norm": boolean},
    active=lambda config: config.kv_latent is not None,
    forward={"kv": keys_values},
    count={"widths": widths, "components": components},
    shapes=shapes, axes=axes, relations=relations, refuse=refuse,
    capabilities=frozenset({"permute_heads", "twin", "sdpa"}),
    text=lambda config: f"C={config.kv_latent}" + (" normed" if config.latent_norm else ""),
    chapter="chapter 7")
