"""The attention layer as a plain function of (config, parameters, inputs), in float64.

For query head h reading key/value group g = h // m (m = H / G), with X of shape (n, d):

    Q_h = X W_Q[h] + b_Q[h],  K_g = X W_K[g] + b_K[g],  V_g = X W_V[g] + b_V[g]
    Q_h, K_g <- RoPE(Q_h), RoPE(K_g)            (first r = rope_fraction * head_dim dims)
    out = sum_h softmax(Q_h K_g^T / sqrt(head_dim) [+ causal mask]) V_g W_O[h] + b_O

Every variant (QK-norm, latent K/V, centred inputs, soft-capping, ALiBi, sinks, gating, ...) is a
row of :mod:`idlib.variants` with hooks into the stages of this one pass (``variants.STAGES``):
:func:`forward` runs them in order and knows no variant by name.  n_layers > 1 is the residual
stack x <- x + layer_l(x), layer l using key/value set l // kv_share, with stacked parameters
(a leading axis per layer or per key/value set, as each row's ``axes`` says).
"""
from __future__ import annotations

import math

from .lazy import torch

from . import variants
from .arguments import (ANY_LAYER, FREQUENCIES, INPUTS, LAYER, PARAMS, SEED, SIZE, THETA, accepts,
                        available_memory)
from .config import AttentionConfig, ConfigError, LatentAttentionConfig
from .fibers import rope_frequencies  # noqa: F401 (re-exported)
from .variants import NORM_EPS, Flow, center, rms_norm  # noqa: F401 (re-exported)
from .variants.rope import apply_rope  # noqa: F401 (re-exported)

Params = dict[str, "torch.Tensor"]
PROJECTION = variants.STAGES[:variants.STAGES.index("rotate") + 1]
WEIGHTS = variants.STAGES[variants.STAGES.index("scores"):variants.STAGES.index("trim") + 1]
AFTER_WEIGHTS = variants.STAGES[variants.STAGES.index("trim") + 1:]
ADDITIVE = ("transform", "mask")    # the score stages forward_sdpa folds into one additive mask


@accepts(config=LAYER)
def param_shapes(config: AttentionConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every parameter, in a fixed order: the rows' parameters in registry order
    (idlib.variants): W_Q (H,d,k), W_K (G,d,k), W_V (G,d,v), W_O (H,v,d); biases b_Q, b_K, b_V,
    b_O; QK-norm gains; with kv_latent C, W_DKV (d,C), W_UK (G,C,k), W_UV (G,C,v) replace W_K,
    W_V; sinks (H,); the output gate W_G (H,d,v).  A stack (n_layers L > 1) puts a leading axis L
    on the per-layer parameters and L / kv_share on the per-set ones.
    """
    return variants.shapes(config)


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


@accepts(config=ANY_LAYER)
def n_params(config: AttentionConfig | LatentAttentionConfig) -> int:
    shapes = latent_param_shapes(config) if isinstance(config, LatentAttentionConfig) else \
        param_shapes(config)
    return sum(math.prod(s) for s in shapes.values())


@accepts(config=LAYER, seed=SEED)
def init_params(config: AttentionConfig, seed: int = 0) -> Params:
    """Generic parameters: weights N(0, 1/fan_in), biases N(0, 1/4), gains N(1, 1/4), seeded."""
    gen = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in param_shapes(config).items():
        scale = 1.0 / math.sqrt(shape[-2]) if name.startswith("W") else 0.5
        params[name] = scale * torch.randn(shape, generator=gen, dtype=torch.float64)
        if name.startswith("g_"):
            params[name] = params[name] + 1.0
    return params


@accepts(config=ANY_LAYER, n_sequences=SIZE, seq_len=SIZE, seed=SEED)
def random_inputs(config: AttentionConfig | LatentAttentionConfig, n_sequences: int, seq_len: int, seed: int = 0) -> torch.Tensor:
    """Inputs X of shape (n_sequences, seq_len, d_model), entries N(0, 1).

    With ``config.input_centered`` each token is centred (zero mean over features), the inputs
    such a layer sees.  Inputs that would not fit in the memory available are refused.
    """
    need = 8 * n_sequences * seq_len * config.d_model
    if need > available_memory():
        raise ConfigError(f"random_inputs: {n_sequences} x {seq_len} x {config.d_model} float64 "
                          f"inputs need {need / 1e9:.3g} GB, more than the memory available")
    gen = torch.Generator().manual_seed(10_000 + seed)
    X = torch.randn(n_sequences, seq_len, config.d_model, generator=gen, dtype=torch.float64)
    return center(X) if getattr(config, "input_centered", False) else X


def flatten(params: Params) -> torch.Tensor:
    """All parameters as one vector, in the order of ``param_shapes``."""
    return torch.cat([p.reshape(-1) for p in params.values()])


@accepts(config=LAYER, theta=THETA)
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


def run(flow: Flow, stages: tuple[str, ...]) -> Flow:
    """Run the rows' hooks of ``stages`` on ``flow`` (in stage order, then registry order)."""
    for stage in stages:
        for hook in variants.hooks(flow.config, stage):
            hook(flow)
    return flow


def project(config: AttentionConfig, params: Params, X: torch.Tensor,
            frequencies: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-head queries, keys and values, (B, H, n, k), (B, H, n, k), (B, H, n, v), after RoPE.

    One layer only (a stack is run layer by layer by ``forward``).
    """
    if config.n_layers > 1:
        raise ValueError("project() takes one layer; use layer_params(config, params, l)")
    flow = run(Flow(config, params, X, frequencies), PROJECTION)
    return flow.q, flow.k, flow.v


def layer_config(config: AttentionConfig) -> AttentionConfig:
    """The configuration of one layer of a stack."""
    return config if config.n_layers == 1 else config.replace(n_layers=1, kv_share=1)


def layer_params(config: AttentionConfig, params: Params, layer: int) -> Params:
    """Parameters of layer ``layer`` of a stack, shaped as for one layer (each parameter indexed
    by the layer or its key/value set along its stack axis, as its row declares)."""
    if config.n_layers == 1:
        return params
    index = {"layer": layer, "set": layer // config.kv_share, None: None}
    stack_axis = {name: index[axis] for name, (axis, _) in variants.axes(config).items()}
    return {name: p if stack_axis.get(name) is None else p[stack_axis[name]]
            for name, p in params.items()}


def attention_weights(config: AttentionConfig, q: torch.Tensor, k: torch.Tensor,
                      params: Params | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(head_dim)) with the rows' score transforms and masks (and, for
    sinks, their logits from ``params``)."""
    flow = Flow(config, {} if params is None else params,
                torch.empty(q.shape[0], q.shape[2], 0, device=q.device),
                q=q, k=k)
    return run(flow, WEIGHTS).weights


@accepts(config=LAYER, params=PARAMS, X=INPUTS, frequencies=FREQUENCIES)
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
    return run(Flow(config, params, X, frequencies), variants.STAGES).out


@accepts(config=LAYER, params=PARAMS, X=INPUTS, frequencies=FREQUENCIES)
def forward_sdpa(config: AttentionConfig, params: Params, X: torch.Tensor,
                 frequencies: torch.Tensor | None = None) -> torch.Tensor:
    """The same layer through torch.nn.functional.scaled_dot_product_attention (a reference).

    Only for layers whose every row declares "sdpa": their score transforms and masks are
    additive and input-free, so they are folded into one additive mask (the hooks applied to
    zero scores).
    """
    missing = variants.unsupported(config, "sdpa")
    if missing:
        raise ValueError(f"forward_sdpa: the variant(s) {', '.join(missing)} have no "
                         "scaled_dot_product_attention form (use forward)")
    if config.n_layers > 1:
        one = layer_config(config)
        for layer in range(config.n_layers):
            X = X + forward_sdpa(one, layer_params(config, params, layer), X, frequencies)
        return X
    flow = run(Flow(config, params, X, frequencies), PROJECTION)
    n = X.shape[1]
    zero = Flow(config, params, X, frequencies,
                scores=torch.zeros(1, config.n_heads, n, n, dtype=torch.float64, device=X.device))
    mask = run(zero, ADDITIVE).scores
    flow.heads = torch.nn.functional.scaled_dot_product_attention(flow.q, flow.k, flow.v,
                                                                  attn_mask=mask)
    return run(flow, AFTER_WEIGHTS[AFTER_WEIGHTS.index("heads") + 1:]).out
