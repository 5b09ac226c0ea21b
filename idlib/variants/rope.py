"""RoPE: the first r = rope_fraction * head_dim dims of every query and key head rotated by position.

Forward: the plane (e_i, e_{i+r/2}) of Q_h, K_g at position p turns by p theta_i,
theta_i = base^(-2i/r) (GPT-NeoX layout; dims r.. pass through).  Count (chapter 4): the QK
symmetry of a group shrinks from GL(k) to the commutant of the rotations, sum over rotation
classes 2 mu^2 + nu_+^2 + nu_-^2; the query bias is identified and the key bias only in the
dims every rotation moves (its nu_+ fixed dims stay unidentified).
"""
from __future__ import annotations

import math

from ..lazy import torch

from ..fibers import _commutant, layer_classes, rope_frequencies
from ..fields import ConfigError, fraction, positive
from .base import Flow, Tally, Variant


def apply_rope(x: torch.Tensor, frequencies: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotate the plane (e_i, e_{i+r/2}) of x[..., p, :] by the angle p * theta_i, r = 2 len(theta).

    Dimensions r.. pass through unchanged (partial RoPE, GPT-NeoX layout).  The angles are made
    on x's device.
    """
    half = frequencies.shape[0]
    if half == 0:
        return x
    angle = positions.to(device=x.device, dtype=torch.float64)[:, None] * frequencies.to(x.device)[None, :]
    cos, sin = angle.cos(), angle.sin()
    x1, x2, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos, rest], dim=-1)


def relations(config) -> None:
    rot = config.rope_fraction * config.head_dim
    if abs(rot - round(rot)) > max(1e-9, 4 * math.ulp(rot)) or round(rot) % 2:
        raise ConfigError(
            f"rope_fraction={config.rope_fraction} times head_dim={config.head_dim} "
            f"= {rot:g} must be an even integer (RoPE rotates pairs of dimensions)")


def refuse(config) -> str | None:
    k, d_in = config.head_dim, config.input_dim
    if k > config.d_model:
        return (f"head_dim={k} must be at most d_model={config.d_model} when rope_fraction > 0 "
                "(the count for a rotary head wider than the model is not derived)")
    if config.input_centered and k > d_in:
        return (f"head_dim={k} must be at most d_model - 1 = {d_in} when rope_fraction > 0 and "
                "input_centered=True (the count is not derived)")
    if config.kv_latent is not None and k > config.kv_latent:
        return (f"head_dim={k} must be at most kv_latent={config.kv_latent} when rope_fraction > 0 "
                "(the count for a rotary head wider than the latent is not derived)")
    return None


def rotate(flow: Flow) -> None:
    freqs = rope_frequencies(flow.config) if flow.frequencies is None else flow.frequencies
    positions = flow.positions
    flow.q, flow.k = apply_rope(flow.q, freqs, positions), apply_rope(flow.k, freqs, positions)


def widths(t: Tally) -> None:
    t.classes = layer_classes(t.config, t.frequencies)


def fibers(t: Tally) -> None:
    t.qk, t.q_bias, t.k_bias = _commutant(t.classes), 0, t.classes[1]


ROW = Variant(
    name="rope",
    summary="rotary position embedding on the first r = rope_fraction * k dims of each head",
    fields={"rope_fraction": fraction, "rope_base": positive},
    active=lambda config: config.rotary_dim > 0,
    forward={"rotate": rotate},
    count={"widths": widths, "fibers": fibers},
    relations=relations, refuse=refuse,
    capabilities=frozenset({"structured", "closed_blocks", "block", "symmetry", "permute_heads", "twin", "sdpa",
                            "conservation"}),
    text=lambda config: f"r={config.rotary_dim}", chapter="chapter 4")
