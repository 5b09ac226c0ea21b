"""Attention sinks: one learned logit s_h per query head in the softmax's denominator (gpt-oss),

    A_h[i, j] = exp(S_h[i, j]) / (sum_j' exp(S_h[i, j']) + exp(s_h)).

The weights of a row no longer sum to one and a constant added to a row of scores is no longer
forgiven.  Count (chapter 10, Theorem "Sink count"): the key bias is identified (as under a cap)
and so is the value bias (its contribution sum_h (1 - sink weight) b_V^g W_O^h varies with the
query); the sinks themselves are identified; nothing else changes.
"""
from __future__ import annotations

from ..lazy import torch

from ..fields import boolean
from .base import Flow, Tally, Variant
from .qk_norm import mode as qk_norm_mode


def shapes(config) -> dict[str, tuple[int, ...]]:
    return {"sinks": (config.n_heads,)}


def axes(config) -> dict[str, tuple[str | None, str | None]]:
    return {"sinks": (None, "head")}


def refuse(config) -> str | None:
    k, v, d_in = config.head_dim, config.value_dim, config.input_dim
    if config.n_layers > 1 or config.kv_latent is not None or config.input_centered:
        return ("sinks=True is derived for one layer without latent or centred inputs "
                "(the count of the other combinations is not derived)")
    norm = qk_norm_mode(config).data
    if norm.get("whole") or norm.get("centred"):
        return (f"sinks=True with qk_norm={config.qk_norm!r} is not derived (only per-head RMS "
                "norms: plain or gain)")
    if max(k, v) > d_in:
        return (f"sinks=True needs head_dim={k} and value_dim={v} at most d_model={d_in} "
                "(the count for wider heads is not derived)")
    return None


def extend(flow: Flow) -> None:
    s = flow.params["sinks"][None, :, None, None].expand(*flow.scores.shape[:-1], 1)
    flow.scores = torch.cat([flow.scores, s], dim=-1)


def trim(flow: Flow) -> None:
    flow.weights = flow.weights[..., :-1]


def fibers(t: Tally) -> None:
    t.k_bias = 0                    # a row constant moves weight to or from the sink
    t.v_bias, t.vo_fix = 0, 0       # sum_h (1 - sink weight) b_V W_O^h varies with the query


def components(t: Tally) -> None:
    t.components.append(("sinks", t.config.n_heads, 0))


ROW = Variant(
    name="sinks",
    summary="attention sinks: a learned logit per head in the softmax denominator (gpt-oss)",
    fields={"sinks": boolean},
    active=lambda config: config.sinks,
    forward={"extend": extend, "trim": trim},
    count={"fibers": fibers, "components": components},
    shapes=shapes, axes=axes, refuse=refuse, forgives_row_constants=False,
    capabilities=frozenset({"permute_heads", "twin"}),
    text=lambda config: "sinks", chapter="chapter 10")
