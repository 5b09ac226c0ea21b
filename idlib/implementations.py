"""The attention code people run: a ``transformers`` module measured the way idlib measures its own.

For a family (a ``model_type`` of :mod:`idlib.hf`) and a small layer, :func:`build` makes the
family's own config object (``LlamaConfig``, ...), reads it back with :func:`idlib.hf.config_from_hf`
(so the reader is checked too), and instantiates the family's attention module (``LlamaAttention``,
``GPT2Attention``, BERT's self-attention with its output projection, ...) in float64, eval mode
(dropout off), eager attention, with seeded random weights: weights N(0, 1/fan_in), biases
N(0, 1/4), norm gains 1 + N(0, 1/4).  :func:`forward` runs the module's own forward with the
family's own rotary embedding and a causal mask where the family is causal.  :func:`measure`
takes the Jacobian of the outputs with respect to the module's own parameters (one flat vector,
``torch.func.functional_call`` + ``jacfwd``), its dense SVD, and the rank and gap by
:func:`idlib.certify.rank_from_singular_values`; :func:`check` pairs it with the closed form.

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

from .certify import is_certified, rank_from_singular_values
from .verdict import Check, check as certify_check
from .attention import latent_param_shapes, n_params, param_shapes
from .config import AttentionConfig, ConfigError, LatentAttentionConfig
from .hf import config_from_hf, family_of
from .rank import default_n_sequences, default_seq_len
from .symmetry import random_group_element

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


@dataclass(frozen=True)
class ModuleMeasurement:
    """Rank of the real module's Jacobian (the fields verdict.Check reads)."""

    rank: int
    n_params: int
    n_rows: int
    gap: float
    certified: bool
    singular_values: torch.Tensor


def inputs(config: AttentionConfig | LatentAttentionConfig, seed: int = 0, n_sequences: int | None = None,
           seq_len: int | None = None) -> torch.Tensor:
    """Seeded N(0, 1) inputs, as many as :func:`idlib.rank.measure` takes for this layer (a latent
    layer: d_model + 2 tokens, and 1.5 times as many output rows as parameters)."""
    latent = isinstance(config, LatentAttentionConfig)
    n = (config.d_model + 2 if latent else default_seq_len(config)) if seq_len is None else seq_len
    if n_sequences is not None:
        B = n_sequences
    else:
        B = math.ceil(1.5 * n_params(config) / (n * config.d_model)) + 1 if latent else \
            default_n_sequences(config, n)
    gen = torch.Generator().manual_seed(10_000 + seed)
    return torch.randn(B, n, config.d_model, generator=gen, dtype=DTYPE)


def jacobian(built: Built, X: torch.Tensor) -> torch.Tensor:
    """d vec(output) / d theta over the module's own parameters, (B n d, P)."""
    params = parameters(built)
    names = list(params)
    shapes = [params[k].shape for k in names]
    sizes = [params[k].numel() for k in names]
    theta = torch.cat([params[k].reshape(-1) for k in names])
    target = _BertWrap(built.module) if built.family == "bert" else built.module

    def f(t: torch.Tensor) -> torch.Tensor:
        ps = {k: c.reshape(s) for k, c, s in zip(names, t.split(sizes), shapes)}
        if built.family == "bert":
            return torch.func.functional_call(target, ps, (X, _mask(X.shape[1], False))).reshape(-1)
        return forward(built, X, ps).reshape(-1)

    return torch.func.jacfwd(f)(theta)


def measure(built: Built, seed: int = 0) -> ModuleMeasurement:
    """Certified rank of the real module's Jacobian at its (seeded) weights, on seeded inputs."""
    X = inputs(built.config, seed)
    with torch.no_grad():
        J = jacobian(built, X)
    sv = torch.linalg.svdvals(J)
    rank, gap = rank_from_singular_values(sv, tuple(J.shape))
    return ModuleMeasurement(rank, J.shape[1], J.shape[0], gap, is_certified(gap), sv)


def check(family: str, seed: int = 0, **layer: Any) -> Check:
    """The closed form of the layer idlib reads from the family's config, against the real module."""
    built = build(family, seed=seed, **layer)
    return certify_check(built.config, measure(built, seed), label=family)


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


def check_family_of(data: Any, name: str = "config", family: str | None = None, seed: int = 0) -> Check:
    """The real-implementation check of a Hugging Face config: its family's module at the small
    layer :func:`small_layer` picks, against the closed form of what idlib reads from it."""
    _, fam, _ = family_of(data, name, family)
    if fam in FLOAT32_INSIDE:
        raise ConfigError(f"{name}: family {fam!r} cannot be measured in float64: {FLOAT32_INSIDE[fam]}")
    if fam not in SPECS:
        raise ConfigError(f"{name}: family {fam!r} has no real-implementation check (known: "
                          f"{', '.join(sorted(SPECS))})")
    config = config_from_hf(data, family=family)
    layer = small_latent_layer(config) if isinstance(config, LatentAttentionConfig) else \
        small_layer(config, fam)
    return check(fam, seed=seed, **layer)


# -- the group action of chapters 1-5 on the real module's weights ---------------------------

@dataclass(frozen=True)
class Layout:
    """Where idlib's W_Q^h, W_K^g, W_V^g, W_O^h (and biases, gains) sit in the module's tensors.

    ``q``, ``k``, ``v``: (weight name, bias name or None, output indices (heads, width));
    ``o``: (weight name, bias name or None, input indices (H, v)); ``conv1d``: weights stored
    (in, out) (GPT-2) instead of nn.Linear's (out, in); ``gains``: QK-norm gain names, and
    whether the norm multiplies by 1 + weight (Gemma)."""

    q: tuple[str, str | None, torch.Tensor]
    k: tuple[str, str | None, torch.Tensor]
    v: tuple[str, str | None, torch.Tensor]
    o: tuple[str, str | None, torch.Tensor]
    conv1d: bool = False
    gains: tuple[str, str] | None = None
    one_plus: bool = False


def _rows(n: int, width: int, start: int = 0, stride: int | None = None) -> torch.Tensor:
    stride = width if stride is None else stride
    return start + torch.arange(n)[:, None] * stride + torch.arange(width)[None, :]


def layout(built: Built) -> Layout:
    """The family's parameter layout (separate, GPT-2's Conv1D, fused per head, fused per group)."""
    c, fam = built.config, built.family
    H, G, k, v, m = c.n_heads, c.n_kv_heads, c.head_dim, c.value_dim, c.group_size
    names = parameters(built)
    bias = lambda w: w[: -len("weight")] + "bias" if w[: -len("weight")] + "bias" in names else None  # noqa: E731
    o_name = {"phi": "dense", "bert": "dense", "t5": "o", "gpt_neox": "dense", "persimmon": "dense",
              "falcon": "dense", "gpt2": "c_proj"}.get(fam, "o_proj") + ".weight"
    o = (o_name, bias(o_name), _rows(H, v))
    if fam in ("gpt_neox", "persimmon") or (fam == "falcon" and not built.hf_config.new_decoder_architecture
                                            and not built.hf_config.multi_query):
        w = "query_key_value.weight"
        rows = _rows(H, k, stride=3 * k)
        return Layout((w, bias(w), rows), (w, bias(w), rows + k), (w, bias(w), rows + 2 * k), o)
    if fam == "falcon":
        w = "query_key_value.weight"
        if built.hf_config.multi_query and not built.hf_config.new_decoder_architecture:
            q = _rows(H, k)
            return Layout((w, bias(w), q), (w, bias(w), _rows(1, k, H * k)),
                          (w, bias(w), _rows(1, k, (H + 1) * k)), o)
        q = torch.cat([_rows(m, k, g * (m + 2) * k) for g in range(G)])
        kk = _rows(G, k, m * k, (m + 2) * k)
        return Layout((w, bias(w), q), (w, bias(w), kk), (w, bias(w), kk + k), o)
    if fam in ("gpt2", "phi3"):
        w = "c_attn.weight" if fam == "gpt2" else "qkv_proj.weight"
        return Layout((w, bias(w), _rows(H, k)), (w, bias(w), _rows(G, k, H * k)),
                      (w, bias(w), _rows(G, v, H * k + G * k)), o, conv1d=fam == "gpt2")
    sep = {"bert": ("self_attn.query", "self_attn.key", "self_attn.value"), "t5": ("q", "k", "v")}.get(
        fam, ("q_proj", "k_proj", "v_proj"))
    q, kk, vv = (s + ".weight" for s in sep)
    gains = ("q_norm.weight", "k_norm.weight") if "q_norm.weight" in names else None
    one_plus = gains is not None and getattr(built.module.q_norm, "one_plus", False)
    return Layout((q, bias(q), _rows(H, k)), (kk, bias(kk), _rows(G, k)), (vv, bias(vv), _rows(G, v)),
                  o, gains=gains, one_plus=one_plus)


def to_params(built: Built) -> dict[str, torch.Tensor]:
    """The module's weights as idlib parameters (W_Q (H, d, k), ..., in idlib.attention's layout)."""
    lay, p = layout(built), parameters(built)
    out: dict[str, torch.Tensor] = {}
    for letter, (w, b, idx) in zip("QKV", (lay.q, lay.k, lay.v)):
        W = p[w] if lay.conv1d else p[w].T                         # (d, outputs)
        out["W_" + letter] = torch.stack([W[:, i] for i in idx])
    W = p[lay.o[0]] if lay.conv1d else p[lay.o[0]].T               # (H v, d)
    out["W_O"] = torch.stack([W[i, :] for i in lay.o[2]])
    for letter, (w, b, idx) in zip("QKVO", (lay.q, lay.k, lay.v, lay.o)):
        if b is not None:
            out["b_" + letter] = p[b] if letter == "O" else torch.stack([p[b][i] for i in idx])
    if lay.gains:
        shapes = param_shapes(built.config)
        for name, g in zip(("g_Q", "g_K"), lay.gains):
            out[name] = (p[g] + 1.0 if lay.one_plus else p[g]).reshape(shapes[name])
    return {name: out[name] for name in param_shapes(built.config)}


def from_params(built: Built, params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The module's parameters with idlib's ``params`` written into them (inverse of to_params)."""
    lay = layout(built)
    p = {k: v.clone() for k, v in parameters(built).items()}
    for letter, (w, b, idx) in zip("QKV", (lay.q, lay.k, lay.v)):
        for i, block in zip(idx, params["W_" + letter]):
            if lay.conv1d:
                p[w][:, i] = block
            else:
                p[w][i, :] = block.T
        if b is not None:
            for i, block in zip(idx, params["b_" + letter]):
                p[b][i] = block
    for i, block in zip(lay.o[2], params["W_O"]):
        if lay.conv1d:
            p[lay.o[0]][i, :] = block
        else:
            p[lay.o[0]][:, i] = block.T
    if lay.o[1] is not None:
        p[lay.o[1]] = params["b_O"].clone()
    if lay.gains:
        for name, g in zip(("g_Q", "g_K"), lay.gains):
            p[g] = (params[name] - 1.0 if lay.one_plus else params[name].clone()).reshape(p[g].shape)
    return p


def symmetry_check(built: Built, seed: int = 0, scale: float = 0.5) -> dict[str, float]:
    """Move the module's weights by a random element of idlib's symmetry group (idlib.symmetry,
    chapters 1-5 and 7) and run the module's own forward: ``move`` = |theta' - theta| / |theta|,
    ``change`` = max |out' - out| / max |out| (round-off when the group is right)."""
    X = inputs(built.config, seed, n_sequences=4)
    if isinstance(built.config, LatentAttentionConfig):
        return _moved_output(built, X, latent_action(built, seed=seed, scale=scale))
    p = to_params(built)
    if from_params(built, p).keys() != parameters(built).keys():
        raise ConfigError(f"{built.family}: layout does not cover the module's parameters")
    if built.config.qk_norm.startswith("layernorm"):
        raise ConfigError(f"{built.family}: the group action for qk_norm="
                          f"{built.config.qk_norm!r} is not implemented")
    act = whole_norm_action if built.config.qk_norm == "whole" else random_group_element
    return _moved_output(built, X, from_params(built, act(built.config, p, seed=seed, scale=scale)))


def _moved_output(built: Built, X: torch.Tensor, moved: dict[str, torch.Tensor]) -> dict[str, float]:
    before = parameters(built)
    flat = lambda d: torch.cat([t.reshape(-1) for t in d.values()])  # noqa: E731
    with torch.no_grad():
        out, out2 = forward(built, X), forward(built, X, moved)
    return {"move": float((flat(moved) - flat(before)).norm() / flat(before).norm()),
            "change": float((out2 - out).abs().max() / out.abs().max())}


def whole_norm_action(config: AttentionConfig, params: dict[str, torch.Tensor], seed: int = 0,
                      scale: float = 0.5) -> dict[str, torch.Tensor]:
    """A random element of the symmetry group of a layer with qk_norm="whole" (chapter 9):
    all queries scaled by e^a and all keys by e^b (the norm forgets both), per key/value group
    g_Q of its heads times e^s and g_K times e^-s with s constant on each rotation plane, and
    GL(v) per group on V/O (W_V B, b_V B, B^{-1} W_O)."""
    gen = torch.Generator().manual_seed(seed)
    rnd = lambda *shape: scale * torch.randn(*shape, generator=gen, dtype=DTYPE)  # noqa: E731
    H, G, k, v, m, r = (config.n_heads, config.n_kv_heads, config.head_dim, config.value_dim,
                        config.group_size, config.rotary_dim)
    p = dict(params)
    a, b = rnd(2).exp()
    p["W_Q"], p["W_K"] = p["W_Q"] * a, p["W_K"] * b
    if "b_Q" in p:
        p["b_Q"] = p["b_Q"] * a
    if "b_K" in p:
        p["b_K"] = p["b_K"] * b
    half = rnd(G, r // 2)                              # one exponent per plane (i, i + r/2)
    s = torch.cat([half, half, rnd(G, k - r)], dim=1)  # and one per pass-through dim
    p["g_Q"] = p["g_Q"] * s.repeat_interleave(m, dim=0).exp()
    p["g_K"] = p["g_K"] * (-s).exp()
    B = torch.eye(v, dtype=DTYPE) + rnd(G, v, v) / v ** 0.5
    Bh = B.repeat_interleave(m, dim=0)
    p["W_V"] = p["W_V"] @ B
    p["W_O"] = torch.linalg.solve(Bh, p["W_O"])
    if "b_V" in p:
        p["b_V"] = torch.einsum("gv,gvw->gw", p["b_V"], B)
    return p


def _rotation_planes(built: Built) -> torch.Tensor:
    """(p / 2, 2) indices of the RoPE key's rotation planes: pairs (2i, 2i+1) (DeepSeek V2, and
    V3 with rope_interleave), else halves (i, i + p/2)."""
    p = built.config.rope_dim
    if built.family == "deepseek_v2" or getattr(built.hf_config, "rope_interleave", False):
        return torch.arange(p).reshape(-1, 2)
    return torch.stack([torch.arange(p // 2), torch.arange(p // 2) + p // 2], dim=1)


def latent_action(built: Built, seed: int = 0, scale: float = 0.5) -> dict[str, torch.Tensor]:
    """The module's parameters moved by a random element of the symmetry group of multi-head
    latent attention (:func:`idlib.counting.count_latent`): per latent W_down -> lambda O W_down
    (bias too), gain g -> g e^s, W_up -> W_up diag(g) O^T diag(g e^s)^-1; per head GL(n) on the
    no-RoPE query/key rows and GL(v) on value rows / output columns; one complex scalar per
    rotation plane on the shared RoPE key (c R_phi) and its inverse transpose on every head's
    RoPE query rows."""
    c = built.config
    gen = torch.Generator().manual_seed(seed)
    rnd = lambda *shape: scale * torch.randn(*shape, generator=gen, dtype=DTYPE)  # noqa: E731
    near_one = lambda m: torch.eye(m, dtype=DTYPE) + rnd(m, m) / m ** 0.5  # noqa: E731
    p = {k: v.clone() for k, v in parameters(built).items()}
    H, C, n, r, v = c.n_heads, c.kv_latent, c.nope_dim, c.rope_dim, c.value_dim
    q_w = "q_proj.weight" if c.q_latent is None else "q_b_proj.weight"
    latents = [("kv_a_proj_with_mqa", C, "kv_a_layernorm.weight", "kv_b_proj.weight")]
    if c.q_latent is not None:
        latents.append(("q_a_proj", c.q_latent, "q_a_layernorm.weight", q_w))
    for down, width, gain, up in latents:
        skew = rnd(width, width)
        O, lam = torch.linalg.matrix_exp(skew - skew.T), rnd(1).exp()
        for key in (down + ".weight", down + ".bias"):
            if key in p:
                p[key][:width] = lam * O @ p[key][:width]
        g_new = p[gain] * rnd(width).exp()
        p[up] = p[up] * p[gain] @ O.T / g_new
        p[gain] = g_new
    q_rows = lambda h: h * (n + r)  # noqa: E731 (first row of head h in the query projection)
    for h in range(H):
        A, B = near_one(n), near_one(v)
        q0, k0 = q_rows(h), h * (n + v)
        p[q_w][q0:q0 + n] = torch.linalg.solve(A.T, p[q_w][q0:q0 + n])
        p["kv_b_proj.weight"][k0:k0 + n] = A @ p["kv_b_proj.weight"][k0:k0 + n]
        p["kv_b_proj.weight"][k0 + n:k0 + n + v] = B @ p["kv_b_proj.weight"][k0 + n:k0 + n + v]
        p["o_proj.weight"][:, h * v:(h + 1) * v] = torch.linalg.solve(
            B.T, p["o_proj.weight"][:, h * v:(h + 1) * v].T).T
    for pair in _rotation_planes(built):
        a, phi = rnd(1).exp(), rnd(1)
        M = a * torch.stack([torch.cat([phi.cos(), -phi.sin()]), torch.cat([phi.sin(), phi.cos()])])
        for key in ("kv_a_proj_with_mqa.weight", "kv_a_proj_with_mqa.bias"):
            if key in p:
                p[key][C + pair] = M @ p[key][C + pair]
        for h in range(H):
            rows = q_rows(h) + n + pair
            p[q_w][rows] = torch.linalg.solve(M.T, p[q_w][rows])
    return p


# the small latent layer of chapter 9 and the tests (d, H, C, n, p, v); a query latent has 6 dims
SMALL_LATENT = dict(d=12, H=2, kv_latent=5, nope_dim=3, rope_dim=4, value_dim=3)


def small_latent_layer(config: LatentAttentionConfig) -> dict[str, Any]:
    """Keyword arguments of :func:`build` for a small latent layer with the structure of
    ``config`` (a query latent or none, the biases, the RoPE base): :data:`SMALL_LATENT`, C_Q 6."""
    return dict(SMALL_LATENT, q_latent=None if config.q_latent is None else 6, bias=config.bias,
                rope_theta=config.rope_base)
