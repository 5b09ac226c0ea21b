"""Biases on any subset of the projections q, k, v, o (``bias``, letters from "qkvo").

Forward: Q_h += b_Q^h, K_g += b_K^g, V_g += b_V^g after the projections; out += b_O.
Count (chapter 3): the query bias rides with W_Q (its fiber beyond the plain one, counted by
the plain row); the key bias is unidentified where softmax forgives it (``Tally.k_bias`` dims
per group, set by the rows); the value bias only adds the constant c = sum_h b_V^g W_O^h to the
output: with an output bias that is absorbed (all G v dims unidentified), otherwise c moves in
min(d, G v) identified directions.  Without an output bias and v > b, the null moves of W_O
shift c in the remaining d - G v directions, which the value bias cannot undo (``vo_fix``).
"""
from __future__ import annotations

from ..fields import letters
from .base import Flow, Tally, Variant, lead


def shapes(config) -> dict[str, tuple[int, ...]]:
    H, G, k, v, d = config.n_heads, config.n_kv_heads, config.head_dim, config.value_dim, config.d_model
    all_ = {"q": ("b_Q", lead(config, "layer") + (H, k)), "k": ("b_K", lead(config, "set") + (G, k)),
            "v": ("b_V", (G, v)), "o": ("b_O", (d,))}
    return dict(all_[letter] for letter in config.bias)


def axes(config) -> dict[str, tuple[str | None, str | None]]:
    return {"b_Q": ("layer", "head"), "b_K": ("set", "group"), "b_V": (None, "group"),
            "b_O": (None, None)}


def refuse(config) -> str | None:
    if config.n_layers > 1 and (config.has_bias("v") or config.has_bias("o")):
        return (f"bias={config.bias!r} with n_layers > 1: value and output biases (letters v, o) "
                "shift the residual stream between layers; that count is not derived")
    return None


def add_projection_biases(flow: Flow) -> None:
    p = flow.params
    if "b_Q" in p:
        flow.q = flow.q + p["b_Q"][None, :, None, :]
    if "b_K" in p:
        flow.k = flow.k + p["b_K"][None, :, None, :]
    if "b_V" in p:
        flow.v = flow.v + p["b_V"][None, :, None, :]


def add_output_bias(flow: Flow) -> None:
    if "b_O" in flow.params:
        flow.out = flow.out + flow.params["b_O"]


def widths(t: Tally) -> None:
    if t.config.has_bias("q"):
        t.a += 1


def fibers(t: Tally) -> None:
    c = t.config
    G, v, d = c.n_kv_heads, c.value_dim, c.d_model
    if c.has_bias("v"):
        t.v_bias = G * v if c.has_bias("o") else G * v - min(d, G * v)
        if not c.has_bias("o") and v > t.b:
            t.vo_fix = max(0, d - G * v)


def components(t: Tally) -> None:
    c = t.config
    L, R, H, G = c.n_layers, c.n_kv_sets, c.n_heads, c.n_kv_heads
    k, v, d = c.head_dim, c.value_dim, c.d_model
    parts = {"q": ("b_Q", L * H * k, R * G * t.q_bias), "k": ("b_K", R * G * k, R * G * t.k_bias),
             "v": ("b_V", G * v, t.v_bias), "o": ("b_O", d, 0)}
    t.components += [parts[letter] for letter in c.bias]


ROW = Variant(
    name="bias",
    summary="biases on the query, key, value and output projections (any subset)",
    fields={"bias": letters},
    active=lambda config: bool(config.bias),
    forward={"bias": add_projection_biases, "output": add_output_bias},
    count={"widths": widths, "fibers": fibers, "components": components},
    shapes=shapes, axes=axes, refuse=refuse,
    capabilities=frozenset({"structured", "closed_blocks", "block", "symmetry", "permute_heads", "twin", "sdpa",
                            "conservation"}),
    text=lambda config: " ".join(f"b_{letter.upper()}" for letter in config.bias),
    chapter="chapter 3")
