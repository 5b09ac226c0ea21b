"""The plain layer: H query heads in G key/value groups, projections, softmax, output projection.

For query head h reading key/value group g = h // m (m = H / G), with X of shape (n, d):

    Q_h = X W_Q[h],  K_g = X W_K[g],  V_g = X W_V[g]
    out = sum_h softmax(Q_h K_g^T / sqrt(head_dim)) V_g W_O[h]

Count (chapters 1, 2, 5): per key/value group the layer sees only the products W_Q^h W_K^T and
W_V W_O^h, so the fibers of those factorisations, ``factor_fiber(d_in, b, k, m)`` and
``factor_fiber(d, b, v, m)`` (k^2 and v^2 when k, v <= d), are unidentified; the query bias's
fiber beyond them; the key bias entirely (softmax forgives a constant per row).
"""
from __future__ import annotations

import math

from ..lazy import torch

from ..fibers import factor_fiber
from ..fields import integer, optional_integer
from .base import Flow, Tally, Variant, lead


def shapes(config) -> dict[str, tuple[int, ...]]:
    d, H, G, k, v = config.d_model, config.n_heads, config.n_kv_heads, config.head_dim, config.value_dim
    out = {"W_Q": lead(config, "layer") + (H, d, k)}
    if config.kv_latent is None:
        out["W_K"] = lead(config, "set") + (G, d, k)
        out["W_V"] = lead(config, "set") + (G, d, v)
    out["W_O"] = lead(config, "layer") + (H, v, d)
    return out


def axes(config) -> dict[str, tuple[str | None, str | None]]:
    return {"W_Q": ("layer", "head"), "W_K": ("set", "group"), "W_V": ("set", "group"),
            "W_O": ("layer", "head")}


def project(flow: Flow) -> None:
    p = flow.params
    flow.q = torch.einsum("bnd,hdk->bhnk", flow.X, p["W_Q"])
    if flow.k is None:
        flow.k = torch.einsum("bnd,gdk->bgnk", flow.X, p["W_K"])
        flow.v = torch.einsum("bnd,gdv->bgnv", flow.X, p["W_V"])


def share(flow: Flow) -> None:
    m = flow.config.group_size
    flow.k, flow.v = flow.k.repeat_interleave(m, dim=1), flow.v.repeat_interleave(m, dim=1)


def scores(flow: Flow) -> None:
    flow.scores = flow.q @ flow.k.transpose(-1, -2) / math.sqrt(flow.config.head_dim)


def softmax(flow: Flow) -> None:
    flow.weights = torch.softmax(flow.scores, dim=-1)


def heads(flow: Flow) -> None:
    flow.heads = flow.weights @ flow.v


def output(flow: Flow) -> None:
    flow.out = torch.einsum("bhnv,hvd->bnd", flow.heads, flow.params["W_O"])


def widths(t: Tally) -> None:
    c = t.config
    t.d_in = t.b = t.a = c.input_dim
    t.kv_in = c.d_model
    t.mm = c.group_size


def fibers(t: Tally) -> None:
    c = t.config
    k, v = c.head_dim, c.value_dim
    t.qk = factor_fiber(t.d_in, t.b, k, t.mm)
    t.q_bias = factor_fiber(t.a, t.b, k, t.mm) - t.qk
    t.k_bias = k
    t.vo = factor_fiber(c.d_model, t.b, v, t.mm)


def components(t: Tally) -> None:
    c = t.config
    L, R, H, G, d = c.n_layers, c.n_kv_sets, c.n_heads, c.n_kv_heads, c.d_model
    k, v = c.head_dim, c.value_dim
    t.components.append(("qk", L * H * d * k + R * G * t.kv_in * k,
                         R * G * (t.qk + t.lat_extra * k) + t.qk_ones + t.qk_layer))
    t.components.append(("vo", L * H * d * v + R * G * t.kv_in * v,
                         R * G * (t.vo + t.lat_extra * v) + t.vo_ones - t.vo_fix))


def text(config) -> str:
    return (f"d={config.d_model} H={config.n_heads} G={config.n_kv_heads} k={config.head_dim} "
            f"v={config.value_dim}")


ROW = Variant(
    name="heads",
    summary="H query heads in G key/value groups of width k (queries, keys) and v (values)",
    fields={"d_model": integer, "n_heads": integer, "n_kv_heads": optional_integer,
            "head_dim": optional_integer, "value_dim": optional_integer},
    active=lambda config: True,
    forward={"project": project, "share": share, "scores": scores, "softmax": softmax,
             "heads": heads, "output": output},
    count={"widths": widths, "fibers": fibers, "components": components},
    shapes=shapes, axes=axes,
    capabilities=frozenset({"structured", "closed_blocks", "block", "symmetry", "permute_heads", "twin", "sdpa",
                            "conservation"}),
    text=text, chapter="chapters 1, 2, 5")
