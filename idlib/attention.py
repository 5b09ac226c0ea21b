"""The attention layer as a plain function of (config, parameters, inputs), in float64.

For query head h reading key/value group g = h // m (m = H / G), with X of shape (n, d):

    Q_h = X W_Q[h] + b_Q[h],  K_g = X W_K[g] + b_K[g],  V_g = X W_V[g] + b_V[g]
    Q_h, K_g <- RoPE(Q_h), RoPE(K_g)            (first r = rope_fraction * head_dim dims)
    out = sum_h softmax(Q_h K_g^T / sqrt(head_dim) [+ causal mask]) V_g W_O[h] + b_O
"""
from __future__ import annotations

import math

import torch

from .config import AttentionConfig

DTYPE = torch.float64
Params = dict[str, torch.Tensor]


def param_shapes(config: AttentionConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every parameter, in a fixed order (weights, then biases q, k, v, o)."""
    d, H, G, k, v = config.d_model, config.n_heads, config.n_kv_heads, config.head_dim, config.value_dim
    shapes = {"W_Q": (H, d, k), "W_K": (G, d, k), "W_V": (G, d, v), "W_O": (H, v, d)}
    bias_shapes = {"q": ("b_Q", (H, k)), "k": ("b_K", (G, k)), "v": ("b_V", (G, v)), "o": ("b_O", (d,))}
    for letter in "qkvo":
        if config.has_bias(letter):
            name, shape = bias_shapes[letter]
            shapes[name] = shape
    return shapes


def n_params(config: AttentionConfig) -> int:
    return sum(math.prod(s) for s in param_shapes(config).values())


def init_params(config: AttentionConfig, seed: int = 0) -> Params:
    """Generic parameters: weights N(0, 1/fan_in), biases N(0, 1/4), from a seeded generator."""
    gen = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in param_shapes(config).items():
        scale = 1.0 / math.sqrt(shape[-2]) if name.startswith("W") else 0.5
        params[name] = scale * torch.randn(shape, generator=gen, dtype=DTYPE)
    return params


def random_inputs(config: AttentionConfig, n_sequences: int, seq_len: int, seed: int = 0) -> torch.Tensor:
    """Inputs X of shape (n_sequences, seq_len, d_model), entries N(0, 1)."""
    gen = torch.Generator().manual_seed(10_000 + seed)
    return torch.randn(n_sequences, seq_len, config.d_model, generator=gen, dtype=DTYPE)


def flatten(params: Params) -> torch.Tensor:
    """All parameters as one vector, in the order of ``param_shapes``."""
    return torch.cat([p.reshape(-1) for p in params.values()])


def unflatten(config: AttentionConfig, theta: torch.Tensor) -> Params:
    """Inverse of ``flatten``."""
    out, i = {}, 0
    for name, shape in param_shapes(config).items():
        size = math.prod(shape)
        out[name] = theta[i:i + size].reshape(shape)
        i += size
    return out


def param_slices(config: AttentionConfig) -> dict[str, slice]:
    """Where each named parameter sits in the flat vector."""
    out, i = {}, 0
    for name, shape in param_shapes(config).items():
        out[name] = slice(i, i + math.prod(shape))
        i += math.prod(shape)
    return out


def rope_frequencies(config: AttentionConfig) -> torch.Tensor:
    """theta_i = base^(-2i/r), i = 0 .. r/2 - 1 (the RoFormer / GPT-NeoX schedule)."""
    r = config.rotary_dim
    i = torch.arange(r // 2, dtype=DTYPE)
    return config.rope_base ** (-2.0 * i / r) if r else i


def apply_rope(x: torch.Tensor, frequencies: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotate the plane (e_i, e_{i+r/2}) of x[..., p, :] by the angle p * theta_i, r = 2 len(theta).

    Dimensions r.. pass through unchanged (partial RoPE, GPT-NeoX layout).
    """
    half = frequencies.shape[0]
    if half == 0:
        return x
    angle = positions.to(DTYPE)[:, None] * frequencies[None, :]
    cos, sin = angle.cos(), angle.sin()
    x1, x2, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos, rest], dim=-1)


def project(config: AttentionConfig, params: Params, X: torch.Tensor,
            frequencies: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-head queries, keys and values, (B, H, n, k), (B, H, n, k), (B, H, n, v), after RoPE."""
    m = config.group_size
    q = torch.einsum("bnd,hdk->bhnk", X, params["W_Q"])
    k = torch.einsum("bnd,gdk->bgnk", X, params["W_K"])
    v = torch.einsum("bnd,gdv->bgnv", X, params["W_V"])
    if "b_Q" in params:
        q = q + params["b_Q"][None, :, None, :]
    if "b_K" in params:
        k = k + params["b_K"][None, :, None, :]
    if "b_V" in params:
        v = v + params["b_V"][None, :, None, :]
    k, v = k.repeat_interleave(m, dim=1), v.repeat_interleave(m, dim=1)
    if config.rotary_dim:
        freqs = rope_frequencies(config) if frequencies is None else frequencies
        positions = torch.arange(X.shape[1])
        q, k = apply_rope(q, freqs, positions), apply_rope(k, freqs, positions)
    return q, k, v


def attention_weights(config: AttentionConfig, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(head_dim)) with the causal mask if the config asks for it."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(config.head_dim)
    if config.causal:
        n = scores.shape[-1]
        mask = torch.ones(n, n, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


def forward(config: AttentionConfig, params: Params, X: torch.Tensor,
            frequencies: torch.Tensor | None = None) -> torch.Tensor:
    """The layer's output, shape (B, n, d_model), for inputs X of shape (B, n, d_model).

    ``frequencies`` overrides the RoPE schedule (used to study repeated frequencies).
    """
    q, k, v = project(config, params, X, frequencies)
    heads = attention_weights(config, q, k) @ v                       # (B, H, n, v)
    out = torch.einsum("bhnv,hvd->bnd", heads, params["W_O"])
    if "b_O" in params:
        out = out + params["b_O"]
    return out


def forward_sdpa(config: AttentionConfig, params: Params, X: torch.Tensor) -> torch.Tensor:
    """The same layer through torch.nn.functional.scaled_dot_product_attention (a reference)."""
    q, k, v = project(config, params, X)
    heads = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=config.causal)
    out = torch.einsum("bhnv,hvd->bnd", heads, params["W_O"])
    return out + params["b_O"] if "b_O" in params else out
