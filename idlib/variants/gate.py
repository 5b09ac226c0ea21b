"""Output gating: each head's output times sigmoid(X W_G^h [+ b_G^h]), elementwise, before W_O
(Qwen3-Next's gated attention).  W_G (H, d, v); b_G (H, v) when the query projection is biased
(the gate is part of the query projection in the models that use it).

Count (chapter 10, Theorem "Gate count"): the elementwise gate commutes only with diagonal
changes of basis, so the value/output symmetry of a group shrinks from GL(v) to the diagonal
scalings (v per group); the value bias is identified (it is gated by a varying factor); the
gate's parameters are identified.
"""
from __future__ import annotations

from ..lazy import torch

from ..fields import boolean
from .base import Flow, Tally, Variant


def shapes(config) -> dict[str, tuple[int, ...]]:
    H, d, v = config.n_heads, config.d_model, config.value_dim
    return {"W_G": (H, d, v), **({"b_G": (H, v)} if config.has_bias("q") else {})}


def axes(config) -> dict[str, tuple[str | None, str | None]]:
    return {"W_G": (None, "head"), "b_G": (None, "head")}


def refuse(config) -> str | None:
    v, d_in = config.value_dim, config.input_dim
    if config.n_layers > 1 or config.kv_latent is not None or config.input_centered:
        return ("output_gate=True is derived for one layer without latent or centred inputs "
                "(the count of the other combinations is not derived)")
    if v > d_in:
        return (f"output_gate=True needs value_dim={v} at most d_model={d_in} (the count for "
                "wider value heads is not derived)")
    return None


def gate(flow: Flow) -> None:
    z = torch.einsum("bnd,hdv->bhnv", flow.X, flow.params["W_G"])
    if "b_G" in flow.params:
        z = z + flow.params["b_G"][None, :, None, :]
    flow.heads = flow.heads * torch.sigmoid(z)


def fibers(t: Tally) -> None:
    t.vo = t.config.value_dim       # only diagonal D: (Z D) * sigmoid(.) = (Z * sigmoid(.)) D
    t.v_bias, t.vo_fix = 0, 0       # b_V * sigmoid(x W_G) varies with the token


def components(t: Tally) -> None:
    c = t.config
    total = c.n_heads * c.d_model * c.value_dim + (c.n_heads * c.value_dim if c.has_bias("q") else 0)
    t.components.append(("gate", total, 0))


ROW = Variant(
    name="gate",
    summary="output gating: each head's output times a sigmoid gate computed from the input",
    fields={"output_gate": boolean},
    active=lambda config: config.output_gate,
    forward={"gate": gate},
    count={"fibers": fibers, "components": components},
    shapes=shapes, axes=axes, refuse=refuse,
    capabilities=frozenset({"permute_heads", "twin", "sdpa"}),
    text=lambda config: "gated", chapter="chapter 10")
