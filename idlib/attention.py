"""The attention layer as a plain function of (config, parameters, inputs), in float64.

For query head h reading key/value group g = h // m (m = H / G), with X of shape (n, d):

    Q_h = X W_Q[h] + b_Q[h],  K_g = X W_K[g] + b_K[g],  V_g = X W_V[g] + b_V[g]
    Q_h, K_g <- RoPE(Q_h), RoPE(K_g)            (first r = rope_fraction * head_dim dims)
    out = sum_h softmax(Q_h K_g^T / sqrt(head_dim) [+ causal mask]) V_g W_O[h] + b_O

Variants (see idlib.config): input_centered replaces X by X - mean over features first;
kv_latent computes K_g = Lat W_UK[g] + b_K[g], V_g = Lat W_UV[g] + b_V[g] from the latent
Lat = X W_DKV (RMS-normalised when latent_norm); qk_norm replaces Q_h, K_g by
rms(Q_h) [* g_Q], rms(K_g) [* g_K] before RoPE, rms(y) = y / sqrt(mean(y^2) + NORM_EPS);
n_layers > 1 is the residual stack x <- x + layer_l(x), layer l using key/value set l // kv_share,
with stacked parameters (leading axis: layer for W_Q, W_O, b_Q, g_Q; key/value set for W_K, W_V,
b_K, g_K).
"""
from __future__ import annotations

import math

import torch

from .config import AttentionConfig, LatentAttentionConfig

DTYPE = torch.float64
Params = dict[str, torch.Tensor]

# eps of every RMS normalisation.  0 (exact): the normalised vector is then invariant under a
# positive rescaling of its input, the symmetry every QK-norm / latent-norm count uses.  Models
# use eps ~ 1e-6; that breaks the rescaling only at relative order eps / mean(y^2), a
# near-symmetry that a Jacobian rank (with its gap rule) cannot tell from an exact one.
NORM_EPS = 0.0


def param_shapes(config: AttentionConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every parameter, in a fixed order (weights, then biases q, k, v, o, gains).

    One layer: W_Q (H,d,k), W_K (G,d,k), W_V (G,d,v), W_O (H,v,d); with kv_latent C, W_DKV (d,C),
    W_UK (G,C,k), W_UV (G,C,v) replace W_K, W_V; qk_norm="gain" adds g_Q (k,), g_K (k,).
    A stack (n_layers L > 1) puts a leading axis L on W_Q, W_O, b_Q, g_Q and L / kv_share on
    W_K, W_V, b_K, g_K.
    """
    d, H, G, k, v = config.d_model, config.n_heads, config.n_kv_heads, config.head_dim, config.value_dim
    L, R = config.n_layers, config.n_kv_sets
    per_layer = (L,) if L > 1 else ()
    per_set = (R,) if L > 1 else ()
    shapes = {"W_Q": per_layer + (H, d, k)}
    if config.kv_latent is None:
        shapes["W_K"] = per_set + (G, d, k)
        shapes["W_V"] = per_set + (G, d, v)
    shapes["W_O"] = per_layer + (H, v, d)
    if config.kv_latent is not None:
        C = config.kv_latent
        shapes.update({"W_DKV": (d, C), "W_UK": (G, C, k), "W_UV": (G, C, v)})
    bias_shapes = {"q": ("b_Q", per_layer + (H, k)), "k": ("b_K", per_set + (G, k)),
                   "v": ("b_V", (G, v)), "o": ("b_O", (d,))}
    for letter in "qkvo":
        if config.has_bias(letter):
            name, shape = bias_shapes[letter]
            shapes[name] = shape
    if config.qk_norm == "gain":
        shapes["g_Q"] = per_layer + (k,)
        shapes["g_K"] = per_set + (k,)
    if config.qk_norm in ("whole", "layernorm"):      # one layer (counting.check_derived)
        shapes["g_Q"] = (H, k)
        shapes["g_K"] = (G, k)
    if config.qk_norm == "layernorm_shared":
        shapes.update({"g_Q": (k,), "c_Q": (k,), "g_K": (k,), "c_K": (k,)})
    return shapes


def latent_param_shapes(config: LatentAttentionConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of the parameters of multi-head latent attention (idlib.config), named as
    in ``transformers``' DeepseekV3Attention: q_a_proj, q_a_layernorm, q_b_proj (or q_proj without a
    query latent), kv_a_proj_with_mqa (latent and RoPE key), kv_a_layernorm, kv_b_proj (keys and
    values, per head), o_proj; biases on q_a_proj, kv_a_proj_with_mqa and o_proj with ``bias``."""
    d, H, C, CQ = config.d_model, config.n_heads, config.kv_latent, config.q_latent
    n, p, v = config.nope_dim, config.rope_dim, config.value_dim
    shapes: dict[str, tuple[int, ...]] = {}
    if CQ is None:
        shapes["q_proj.weight"] = (H * (n + p), d)
    else:
        shapes.update({"q_a_proj.weight": (CQ, d), "q_a_layernorm.weight": (CQ,),
                       "q_b_proj.weight": (H * (n + p), CQ)})
    shapes.update({"kv_a_proj_with_mqa.weight": (C + p, d), "kv_a_layernorm.weight": (C,),
                   "kv_b_proj.weight": (H * (n + v), C), "o_proj.weight": (d, H * v)})
    if config.bias:
        shapes.update({"kv_a_proj_with_mqa.bias": (C + p,), "o_proj.bias": (d,)})
        if CQ is not None:
            shapes["q_a_proj.bias"] = (CQ,)
    return shapes


def n_params(config: AttentionConfig | LatentAttentionConfig) -> int:
    shapes = latent_param_shapes(config) if isinstance(config, LatentAttentionConfig) else \
        param_shapes(config)
    return sum(math.prod(s) for s in shapes.values())


def init_params(config: AttentionConfig, seed: int = 0) -> Params:
    """Generic parameters: weights N(0, 1/fan_in), biases N(0, 1/4), gains N(1, 1/4), seeded."""
    gen = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in param_shapes(config).items():
        scale = 1.0 / math.sqrt(shape[-2]) if name.startswith("W") else 0.5
        params[name] = scale * torch.randn(shape, generator=gen, dtype=DTYPE)
        if name.startswith("g_"):
            params[name] = params[name] + 1.0
    return params


def random_inputs(config: AttentionConfig, n_sequences: int, seq_len: int, seed: int = 0) -> torch.Tensor:
    """Inputs X of shape (n_sequences, seq_len, d_model), entries N(0, 1).

    With ``config.input_centered`` each token is centred (zero mean over features), the inputs
    such a layer sees.
    """
    gen = torch.Generator().manual_seed(10_000 + seed)
    X = torch.randn(n_sequences, seq_len, config.d_model, generator=gen, dtype=DTYPE)
    return center(X) if config.input_centered else X


def center(X: torch.Tensor) -> torch.Tensor:
    """X minus its mean over the feature axis (what a LayerNorm without affine does first)."""
    return X - X.mean(dim=-1, keepdim=True)


def rms_norm(y: torch.Tensor) -> torch.Tensor:
    """y / sqrt(mean(y^2) + NORM_EPS) over the last axis (no gain)."""
    return y / torch.sqrt(y.pow(2).mean(dim=-1, keepdim=True) + NORM_EPS)


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
    """Per-head queries, keys and values, (B, H, n, k), (B, H, n, k), (B, H, n, v), after RoPE.

    One layer only (a stack is run layer by layer by ``forward``).
    """
    if config.n_layers > 1:
        raise ValueError("project() takes one layer; use layer_params(config, params, l)")
    m = config.group_size
    if config.input_centered:
        X = center(X)
    q = torch.einsum("bnd,hdk->bhnk", X, params["W_Q"])
    if config.kv_latent is None:
        k = torch.einsum("bnd,gdk->bgnk", X, params["W_K"])
        v = torch.einsum("bnd,gdv->bgnv", X, params["W_V"])
    else:
        lat = X @ params["W_DKV"]                                      # (B, n, C)
        if config.latent_norm:
            lat = rms_norm(lat)
        k = torch.einsum("bnc,gck->bgnk", lat, params["W_UK"])
        v = torch.einsum("bnc,gcv->bgnv", lat, params["W_UV"])
    if "b_Q" in params:
        q = q + params["b_Q"][None, :, None, :]
    if "b_K" in params:
        k = k + params["b_K"][None, :, None, :]
    if "b_V" in params:
        v = v + params["b_V"][None, :, None, :]
    if config.qk_norm == "whole":                    # all heads together (OLMo 2), then gains
        q = params["g_Q"][:, None, :] * q / torch.sqrt(q.pow(2).mean(dim=(1, 3), keepdim=True) + NORM_EPS)
        k = params["g_K"][:, None, :] * k / torch.sqrt(k.pow(2).mean(dim=(1, 3), keepdim=True) + NORM_EPS)
    elif config.qk_norm in ("layernorm", "layernorm_shared"):   # LayerNorm per head (mean out)
        q, k = rms_norm(center(q)), rms_norm(center(k))
        if config.qk_norm == "layernorm":
            q, k = q * params["g_Q"][:, None, :], k * params["g_K"][:, None, :]
        else:
            q, k = q * params["g_Q"] + params["c_Q"], k * params["g_K"] + params["c_K"]
    elif config.qk_norm != "none":
        q, k = rms_norm(q), rms_norm(k)
        if config.qk_norm == "gain":
            q, k = q * params["g_Q"], k * params["g_K"]
    k, v = k.repeat_interleave(m, dim=1), v.repeat_interleave(m, dim=1)
    if config.rotary_dim:
        freqs = rope_frequencies(config) if frequencies is None else frequencies
        positions = torch.arange(X.shape[1])
        q, k = apply_rope(q, freqs, positions), apply_rope(k, freqs, positions)
    return q, k, v


def layer_config(config: AttentionConfig) -> AttentionConfig:
    """The configuration of one layer of a stack."""
    return config if config.n_layers == 1 else config.replace(n_layers=1, kv_share=1)


PER_LAYER = ("W_Q", "W_O", "b_Q", "g_Q")


def layer_params(config: AttentionConfig, params: Params, layer: int) -> Params:
    """Parameters of layer ``layer`` of a stack, shaped as for one layer."""
    if config.n_layers == 1:
        return params
    s = layer // config.kv_share
    return {name: p[layer] if name in PER_LAYER else (p[s] if name in ("W_K", "W_V", "b_K", "g_K") else p)
            for name, p in params.items()}


def attention_weights(config: AttentionConfig, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(head_dim)) with the causal mask if the config asks for it."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(config.head_dim)
    if config.softcap is not None:                    # logit soft-capping (Gemma 2)
        scores = config.softcap * torch.tanh(scores / config.softcap)
    if config.causal:
        n = scores.shape[-1]
        mask = torch.ones(n, n, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


def forward(config: AttentionConfig, params: Params, X: torch.Tensor,
            frequencies: torch.Tensor | None = None) -> torch.Tensor:
    """The layer's output, shape (B, n, d_model), for inputs X of shape (B, n, d_model).

    ``frequencies`` overrides the RoPE schedule (used to study repeated frequencies).
    With n_layers > 1: the stack's output, x <- x + layer_l(x) for l = 0 .. L-1.
    """
    if config.n_layers > 1:
        one = layer_config(config)
        for layer in range(config.n_layers):
            X = X + forward(one, layer_params(config, params, layer), X, frequencies)
        return X
    q, k, v = project(config, params, X, frequencies)
    heads = attention_weights(config, q, k) @ v                       # (B, H, n, v)
    out = torch.einsum("bhnv,hvd->bnd", heads, params["W_O"])
    if "b_O" in params:
        out = out + params["b_O"]
    return out


def forward_sdpa(config: AttentionConfig, params: Params, X: torch.Tensor) -> torch.Tensor:
    """The same layer through torch.nn.functional.scaled_dot_product_attention (a reference)."""
    if config.n_layers > 1:
        one = layer_config(config)
        for layer in range(config.n_layers):
            X = X + forward_sdpa(one, layer_params(config, params, layer), X)
        return X
    q, k, v = project(config, params, X)
    heads = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=config.causal)
    out = torch.einsum("bhnv,hvd->bnd", heads, params["W_O"])
    return out + params["b_O"] if "b_O" in params else out
