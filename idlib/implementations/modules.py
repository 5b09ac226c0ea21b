"""Building the attention modules people run: a ``transformers`` family's own module for a small
layer, in float64, with seeded random weights, and running its own forward.

For a family (a ``model_type`` of :mod:`idlib.hf`) and a small layer, :func:`build` makes the
family's own config object (``LlamaConfig``, ...), reads it back with :func:`idlib.hf.config_from_hf`
(so the reader is checked too), and instantiates the family's attention module (``LlamaAttention``,
``GPT2Attention``, BERT's self-attention with its output projection, ...) in float64, eval mode
(dropout off), eager attention, with seeded random weights: weights N(0, 1/fan_in), biases
N(0, 1/4), norm gains 1 + N(0, 1/4).  :func:`forward` runs the module's own forward with the
family's own rotary embedding and a causal mask where the family is causal.  Every step a module
rounds through float32 on float64 inputs (softmax, RMSNorm, RoPE) is re-evaluated in float64
(:data:`FLOAT64_PATCHES` lists them).

``transformers`` is optional: it is imported inside these functions only.
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..config import AttentionConfig, ConfigError, LatentAttentionConfig
from ..hf import config_from_hf

DTYPE = torch.float64


@dataclass(frozen=True)
class Spec:
    """Where a family's code lives and how its config spells a small layer."""

    config_class: str
    module: str                 # transformers.models.<module>
    attention: str              # the attention class
    kwargs: Callable[..., dict[str, Any]]   # (d, H, G, k, r_frac, bias, theta) -> config kwargs,
    latent: bool = False        # or, for multi-head latent attention, (LatentAttentionConfig) -> them


def _rope(frac: float, theta: float) -> dict[str, Any]:
    return {"rope_parameters": {"rope_type": "default", "rope_theta": theta,
                                "partial_rotary_factor": frac}}


def _llama(bias_key: str | None = "attention_bias", head_dim: bool = True):
    def kw(d, H, G, k, frac, bias, theta):
        out = dict(hidden_size=d, num_attention_heads=H, num_key_value_heads=G, **_rope(frac, theta))
        if head_dim:
            out["head_dim"] = k
        if bias_key:
            out[bias_key] = bool(bias)
        return out
    return kw


def _latent(c: LatentAttentionConfig) -> dict[str, Any]:
    return dict(hidden_size=c.d_model, num_attention_heads=c.n_heads, num_key_value_heads=c.n_heads,
                kv_lora_rank=c.kv_latent, q_lora_rank=c.q_latent, qk_nope_head_dim=c.nope_dim,
                qk_rope_head_dim=c.rope_dim, v_head_dim=c.value_dim, attention_bias=c.bias,
                rope_parameters={"rope_type": "default", "rope_theta": c.rope_base})


SPECS: dict[str, Spec] = {
    "llama": Spec("LlamaConfig", "llama", "LlamaAttention", _llama()),
    "mistral": Spec("MistralConfig", "mistral", "MistralAttention", _llama(None)),
    "mixtral": Spec("MixtralConfig", "mixtral", "MixtralAttention", _llama(None)),
    "qwen2": Spec("Qwen2Config", "qwen2", "Qwen2Attention", _llama(None)),
    "qwen2_moe": Spec("Qwen2MoeConfig", "qwen2_moe", "Qwen2MoeAttention", _llama("qkv_bias")),
    "qwen3": Spec("Qwen3Config", "qwen3", "Qwen3Attention", _llama()),
    "qwen3_moe": Spec("Qwen3MoeConfig", "qwen3_moe", "Qwen3MoeAttention", _llama()),
    "gemma": Spec("GemmaConfig", "gemma", "GemmaAttention", _llama()),
    "gemma2": Spec("Gemma2Config", "gemma2", "Gemma2Attention", _llama()),
    "gemma3_text": Spec("Gemma3TextConfig", "gemma3", "Gemma3Attention", _llama()),
    "granite": Spec("GraniteConfig", "granite", "GraniteAttention", _llama()),
    "olmo": Spec("OlmoConfig", "olmo", "OlmoAttention", _llama()),
    "olmo2": Spec("Olmo2Config", "olmo2", "Olmo2Attention", _llama()),
    "olmoe": Spec("OlmoeConfig", "olmoe", "OlmoeAttention", _llama(head_dim=False)),
    "glm": Spec("GlmConfig", "glm", "GlmAttention", _llama()),
    "starcoder2": Spec("Starcoder2Config", "starcoder2", "Starcoder2Attention", _llama("use_bias", False)),
    "phi3": Spec("Phi3Config", "phi3", "Phi3Attention", _llama(None, False)),
    "phi": Spec("PhiConfig", "phi", "PhiAttention", _llama(None, False)),
    "stablelm": Spec("StableLmConfig", "stablelm", "StableLmAttention", _llama("use_qkv_bias", False)),
    "persimmon": Spec("PersimmonConfig", "persimmon", "PersimmonAttention",
                      lambda d, H, G, k, frac, bias, theta: dict(
                          hidden_size=d, num_attention_heads=H, qk_layernorm=False, **_rope(frac, theta))),
    "gpt_neox": Spec("GPTNeoXConfig", "gpt_neox", "GPTNeoXAttention",
                     lambda d, H, G, k, frac, bias, theta: dict(
                         hidden_size=d, num_attention_heads=H, attention_bias=bool(bias),
                         **_rope(frac, theta))),
    "falcon": Spec("FalconConfig", "falcon", "FalconAttention",
                   lambda d, H, G, k, frac, bias, theta: dict(
                       hidden_size=d, num_attention_heads=H, bias=bool(bias), new_decoder_architecture=G > 1,
                       multi_query=G == 1, num_kv_heads=G, **_rope(frac, theta))),
    "gpt2": Spec("GPT2Config", "gpt2", "GPT2Attention",
                 lambda d, H, G, k, frac, bias, theta: dict(n_embd=d, n_head=H)),
    "bert": Spec("BertConfig", "bert", "BertAttention",
                 lambda d, H, G, k, frac, bias, theta: dict(hidden_size=d, num_attention_heads=H)),
    "t5": Spec("T5Config", "t5", "T5Attention",
               lambda d, H, G, k, frac, bias, theta: dict(d_model=d, num_heads=H, d_kv=k)),
    "deepseek_v2": Spec("DeepseekV2Config", "deepseek_v2", "DeepseekV2Attention", _latent, latent=True),
    "deepseek_v3": Spec("DeepseekV3Config", "deepseek_v3", "DeepseekV3Attention", _latent, latent=True),
}


@dataclass
class Built:
    """A family's attention module, its config object and the AttentionConfig idlib reads from it."""

    family: str
    hf_config: Any
    module: torch.nn.Module
    config: AttentionConfig | LatentAttentionConfig
    rotary: torch.nn.Module | None


def _transformers() -> Any:
    try:
        return importlib.import_module("transformers")
    except ImportError:  # pragma: no cover - the pinned environment has it
        raise ConfigError("the real-implementation check needs the 'transformers' package") from None


def hf_config(family: str, d: int, H: int, G: int | None = None, k: int | None = None,
              rope_fraction: float = 1.0, bias: bool = False, rope_theta: float = 10000.0,
              **extra: Any) -> Any:
    """The family's own config object for a small layer (extra: more config fields; for multi-head
    latent attention the LatentAttentionConfig fields kv_latent, nope_dim, ... go there)."""
    if family not in SPECS:
        raise ConfigError(f"family={family!r} has no real-implementation check (known: "
                          f"{', '.join(sorted(SPECS))})")
    spec = SPECS[family]
    G = H if G is None else G
    k = d // H if k is None else k
    if spec.latent:
        kw = spec.kwargs(LatentAttentionConfig(d_model=d, n_heads=H, bias=bool(bias),
                                               rope_base=rope_theta, **extra))
    else:
        kw = spec.kwargs(d, H, G, k, rope_fraction, bias, rope_theta) | extra
    transformers = _transformers()
    cfg = getattr(transformers, spec.config_class)(**kw)
    transformers.AttentionInterface.register(ATTENTION, eager64)
    cfg._attn_implementation = ATTENTION
    return cfg


ATTENTION = "idlib_eager64"


def eager64(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
            attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
            softcap: float | None = None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' eager attention (grouped K/V, scale, soft-cap, additive mask, softmax) with
    the softmax in the inputs' dtype: eager upcasts it to float32, whose round-off (1e-7) would
    be measured as identified directions in a float64 Jacobian."""
    m = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(m, dim=1), value.repeat_interleave(m, dim=1)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    w = query @ key.transpose(2, 3) * scaling
    if softcap is not None:
        w = torch.tanh(w / softcap) * softcap
    if attention_mask is not None:
        w = w + attention_mask[:, :, :, : key.shape[-2]]
    w = torch.softmax(w, dim=-1)
    return (w @ value).transpose(1, 2).contiguous(), w


def _module(family: str, cfg: Any) -> tuple[torch.nn.Module, torch.nn.Module | None]:
    spec = SPECS[family]
    mod = importlib.import_module(f"transformers.models.{spec.module}.modeling_{spec.module}")
    cls = getattr(mod, spec.attention)
    params = inspect.signature(cls.__init__).parameters
    kw = {"layer_idx": 0} if "layer_idx" in params else {}
    module = cls(cfg, **kw)
    prefix = spec.attention[: -len("Attention")]
    rot_cls = getattr(mod, prefix + "RotaryEmbedding", None)
    rotary = None
    if rot_cls is not None:
        rotary = rot_cls(config=cfg)
    return module, rotary


def randomize(module: torch.nn.Module, seed: int = 0) -> None:
    """Seeded generic weights: matrices N(0, 1/fan_in), biases N(0, 1/4), norm gains 1 + N(0, 1/4)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            z = torch.randn(p.shape, generator=gen, dtype=DTYPE)
            if p.ndim >= 2:
                p.copy_(z / math.sqrt(p.shape[-1]))
            elif name.endswith("bias"):
                p.copy_(0.5 * z)
            else:                                    # a norm's gain
                p.copy_(1.0 + 0.5 * z)


NORM_EPS_FIELDS = ("rms_norm_eps", "layer_norm_eps")


# not measured: their modules compute in float32 whatever the weights' dtype, and float32
# round-off (1e-7) in a float64 Jacobian reads as identified directions
FLOAT32_INSIDE = {"cohere": "CohereAttention applies RoPE in float32 (q.float(), k.float())",
                  "gptj": "GPTJAttention computes its scores in float32 (query.to(torch.float32))"}


def build(family: str, seed: int = 0, norm_eps: float = 0.0, **layer: Any) -> Built:
    """The family's attention module for a small layer (see :func:`hf_config`), float64, eval.

    ``norm_eps``: the eps of the module's own norms (QK-norm); 0, where the count is exact, by
    default (chapter 9 shows how eps > 0 lifts the scale directions).
    """
    cfg = hf_config(family, **layer)
    for name in NORM_EPS_FIELDS:
        if hasattr(cfg, name):
            setattr(cfg, name, norm_eps)
    config = config_from_hf(cfg.to_dict())
    module, rotary = _module(family, cfg)
    module = module.to(DTYPE).eval()
    if rotary is not None:
        rotary = rotary.to(DTYPE)
    randomize(module, seed)
    _norms_in_float64(module, norm_eps)
    return Built(family, cfg, module, config, rotary)


def _mask(n: int, causal: bool) -> torch.Tensor:
    m = torch.zeros(1, 1, n, n, dtype=DTYPE)
    if causal:
        m = m.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), torch.finfo(DTYPE).min)
    return m


def forward(built: Built, X: torch.Tensor, params: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
    """The module's own forward on X (B, n, d) -> (B, n, d); ``params`` replaces its parameters."""
    module = built.module
    n = X.shape[1]
    pos = torch.arange(n)[None].expand(X.shape[0], n)
    mask = _mask(n, built.config.causal)
    if built.family == "bert":
        def call(x: torch.Tensor) -> torch.Tensor:
            ctx = module.self(x, attention_mask=mask)[0]
            return module.output.dense(ctx)
        target, args = _BertWrap(module), None
        if params is None:
            return call(X)
        return torch.func.functional_call(target, params, (X, mask))
    if built.family == "deepseek_v2":
        with _complex128_rotation():
            return _forward(built, X, params, pos, mask)
    return _forward(built, X, params, pos, mask)


def _forward(built: Built, X: torch.Tensor, params: dict[str, torch.Tensor] | None,
             pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    module, n = built.module, X.shape[1]
    kw: dict[str, Any] = {"hidden_states": X}
    sig = inspect.signature(module.forward).parameters
    if "attention_mask" in sig:
        kw["attention_mask"] = mask
    if "mask" in sig:
        kw["mask"] = mask
    if "position_ids" in sig:
        kw["position_ids"] = pos
    if "alibi" in sig:
        kw["alibi"] = None
    if "position_embeddings" in sig and built.rotary is not None:
        types = getattr(built.hf_config, "layer_types", None)
        layer_type = types[0] if types and "layer_type" in inspect.signature(
            built.rotary.forward).parameters else None
        kw["position_embeddings"] = position_embeddings(built.rotary, X, pos, layer_type)
    if built.family == "t5":
        kw["position_bias"] = torch.zeros(1, built.config.n_heads, n, n, dtype=DTYPE) + mask
    out = module(**kw) if params is None else torch.func.functional_call(module, params, (), kw)
    return out[0]


def position_embeddings(rotary: torch.nn.Module, X: torch.Tensor, pos: torch.Tensor,
                        layer_type: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) of the family's rotary embedding, evaluated in float64.

    The modules compute cos and sin in float32 (autocast-safe); a rotation rounded to float32 is
    not exactly R(1)^i, which breaks the RoPE commutant at 1e-7 and would be measured as
    identified.  The frequencies (``inv_freq``), scaling and pair layout are the family's own:
    the layout (halves or interleaved pairs) is read off the module's float32 output.
    """
    pre = "" if layer_type is None else f"{layer_type}_"
    own = rotary(X, pos) if layer_type is None else rotary(X, pos, layer_type)
    freqs = pos[..., None].to(DTYPE) * getattr(rotary, pre + "inv_freq").to(DTYPE)
    scale = float(getattr(rotary, pre + "attention_scaling", 1.0))
    if torch.is_tensor(own) and own.is_complex():            # DeepSeek V2: e^{i t theta} itself
        exact = torch.polar(torch.full_like(freqs, scale), freqs)
        if not torch.allclose(exact, own.to(torch.complex128), atol=1e-5):
            raise ConfigError(f"{type(rotary).__name__}: unknown rotary layout")
        return exact
    cos32, _ = own
    for emb in (torch.cat([freqs, freqs], dim=-1), torch.repeat_interleave(freqs, 2, dim=-1)):
        if emb.shape == cos32.shape and torch.allclose(emb.cos() * scale, cos32.to(DTYPE), atol=1e-5):
            return (emb.cos() * scale).to(DTYPE), (emb.sin() * scale).to(DTYPE)
    raise ConfigError(f"{type(rotary).__name__}: unknown rotary layout")


class RMSNorm64(torch.nn.Module):
    """A family's RMSNorm re-evaluated in float64: gain * y / sqrt(mean(y^2) + eps), the gain
    being ``weight`` or ``1 + weight`` (Gemma), as the module's own forward computes it (checked
    on a random input to float32 round-off when it is built).  Their forward casts to float32."""

    def __init__(self, norm: torch.nn.Module, one_plus: bool) -> None:
        super().__init__()
        self.weight = norm.weight
        self.eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 0.0)))
        self.one_plus = one_plus

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        gain = 1.0 + self.weight if self.one_plus else self.weight
        return gain * y / torch.sqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)


def _apply_rotary_emb64(xq: torch.Tensor, xk: torch.Tensor,
                        freqs_cis: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepseekV2's apply_rotary_emb (pairs (2i, 2i+1) as complex numbers times e^{i t theta_i})
    in complex128: its own casts the pairs to complex64 (``xq.float()``)."""
    xq_ = torch.view_as_complex(xq.reshape(*xq.shape[:-1], -1, 2).contiguous())
    xk_ = torch.view_as_complex(xk.reshape(*xk.shape[:-1], -1, 2).contiguous())
    f = freqs_cis.unsqueeze(1)
    return torch.view_as_real(xq_ * f).flatten(3), torch.view_as_real(xk_ * f).flatten(3)


@contextlib.contextmanager
def _complex128_rotation() -> Any:
    """DeepseekV2's module-level apply_rotary_emb replaced by :func:`_apply_rotary_emb64` for the
    duration of one forward (restored after it)."""
    mod = importlib.import_module("transformers.models.deepseek_v2.modeling_deepseek_v2")
    own = mod.apply_rotary_emb
    mod.apply_rotary_emb = _apply_rotary_emb64
    try:
        yield
    finally:
        mod.apply_rotary_emb = own


def _norms_in_float64(module: torch.nn.Module, eps: float = 0.0) -> None:
    """Replace every RMSNorm child by :class:`RMSNorm64` (same parameter, same function), with
    ``eps`` (the modules' own eps where they take it from the config; DeepSeek's latent norms keep
    the class default 1e-6 whatever the config says, so it is set here)."""
    for name, child in list(module.named_children()):
        if not type(child).__name__.endswith("RMSNorm"):
            continue
        y = torch.randn(3, child.weight.shape[-1], dtype=DTYPE, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            own = child(y)
            for one_plus in (False, True):
                new = RMSNorm64(child, one_plus)
                if torch.allclose(new(y), own, rtol=1e-5, atol=1e-5):
                    new.eps = eps
                    setattr(module, name, new)
                    break
            else:
                raise ConfigError(f"{type(child).__name__}: not an RMSNorm of a known form")


class _BertWrap(torch.nn.Module):
    """BERT's self-attention and its output projection (the block's LayerNorm left out)."""

    def __init__(self, attention: torch.nn.Module) -> None:
        super().__init__()
        self.self_attn = attention.self
        self.dense = attention.output.dense

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.dense(self.self_attn(x, attention_mask=mask)[0])


def parameters(built: Built) -> dict[str, torch.Tensor]:
    """The parameters the layer function depends on, by the module's own names."""
    if built.family == "bert":
        return {k: v.detach() for k, v in _BertWrap(built.module).named_parameters()}
    return {k: v.detach() for k, v in built.module.named_parameters()}


# families whose modules fix head_dim = hidden_size / heads
HEAD_DIM_FIXED = {"phi", "phi3", "stablelm", "persimmon", "gpt_neox", "falcon", "gpt2", "bert"}


def small_layer(config: AttentionConfig, family: str, widths: range = range(8, 17)) -> dict[str, Any]:
    """Keyword arguments of :func:`build` for a small layer with the structure of ``config``:
    group size m (at most 4) and two groups (one where that gives a narrower d), the rotary share, biases (the family's flag),
    QK-norm and causality come from the family's config; the smallest width that fits wins."""
    G = min(config.n_kv_heads, 2)
    m = min(config.group_size, 4)
    if config.group_size == 1:
        G, m = min(config.n_heads, 2), 1
    frac = config.rope_fraction
    for d in widths:
        for G_ in sorted({G, 1}, reverse=True):      # two groups, else one (a narrower d)
            H = G_ * m
            ks = [d // H] if family in HEAD_DIM_FIXED or d % H == 0 else []
            if family not in HEAD_DIM_FIXED:
                ks += [k for k in range(2, d + 1) if k not in ks]
            for k in ks:
                if k < 1 or (family in HEAD_DIM_FIXED and d % H):
                    continue
                r = frac * k
                if abs(r - round(r)) > 1e-9 or round(r) % 2 or (frac and not round(r)):
                    continue
                return dict(d=d, H=H, G=G_, k=k, rope_fraction=frac, bias=bool(config.bias),
                            rope_theta=config.rope_base)
    raise ConfigError(f"no small layer of family {family!r} with the structure of {config}")


# the small latent layer of chapter 9 and the tests (d, H, C, n, p, v); a query latent has 6 dims
SMALL_LATENT = dict(d=12, H=2, kv_latent=5, nope_dim=3, rope_dim=4, value_dim=3)


def small_latent_layer(config: LatentAttentionConfig) -> dict[str, Any]:
    """Keyword arguments of :func:`build` for a small latent layer with the structure of
    ``config`` (a query latent or none, the biases, the RoPE base): :data:`SMALL_LATENT`, C_Q 6."""
    return dict(SMALL_LATENT, q_latent=None if config.q_latent is None else 6, bias=config.bias,
                rope_theta=config.rope_base)
