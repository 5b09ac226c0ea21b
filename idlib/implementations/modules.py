"""Building the attention modules people run: a ``transformers`` family's own module for a small
layer, in float64, with seeded random weights, and running its own forward.

For a family (a ``model_type`` of :mod:`idlib.hf`) and a small layer, :func:`build` makes the
family's own config object (``LlamaConfig``, ...), reads it back with
:func:`idlib.hf.model_from_hf` (so the reader is checked too) at the layer it builds
(``layer_idx``: families whose layers differ, RoPE on some and not on others, have one module per
layer type), and instantiates the family's attention module (``LlamaAttention``,
``GPT2Attention``, BERT's self-attention with its output projection, ...) for that layer in
float64, eval mode (dropout off), eager attention, with seeded random weights: weights
N(0, 1/fan_in), biases N(0, 1/4), norm gains 1 + N(0, 1/4), other vectors (GPT-OSS's sinks)
N(0, 1/4).  :func:`forward` runs the module's own forward with the family's own rotary
embedding, the position inputs its model would pass (ALiBi tensors) and a causal mask where the
family is causal.  Every step a module rounds through float32 on float64 inputs (softmax,
RMSNorm, L2 norm, LayerNorm, RoPE and complex RoPE, ALiBi tensors, sin/cos tables) is
re-evaluated in float64: the generic ones (:data:`FLOAT64_EVERYWHERE`) for every family, the
family's own casts (:data:`FLOAT64_PATCHES`) by patches that hold for the duration of one forward
and are undone after it (no global state is left changed).  ``forward(..., float64=False)`` runs
the module's own float32 path instead (its own eager attention, norms, rotary and casts).

``transformers`` is optional: it is imported inside these functions only.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import math
import sys
import textwrap
import types
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ..lazy import torch

from ..config import AttentionConfig, ConfigError, LatentAttentionConfig
from ..counting import check_derived
from ..hf import model_from_hf



@dataclass(frozen=True)
class Spec:
    """Where a family's code lives and how its config spells a small layer."""

    config_class: str
    module: str                 # transformers.models.<module>
    attention: str              # the attention class
    kwargs: Callable[..., dict[str, Any]]   # (d, H, G, k, r_frac, bias, theta) -> config kwargs,
    latent: bool = False        # or, for multi-head latent attention, (LatentAttentionConfig) -> them
    heads_multiple: int = 1     # the module needs a multiple of this many heads (CodeGen: 4)
    structure: tuple[str, ...] = ()   # per-layer fields a config file's small twin copies
    layers_field: str = "num_hidden_layers"   # the config class's number of layers


def _rope(frac: float, theta: float) -> dict[str, Any]:
    return {"rope_parameters": {"rope_type": "default", "rope_theta": theta,
                                "partial_rotary_factor": frac}}


def _letters(bias: Any) -> str:
    """``bias``: True (the family's flag on), False, or the biased projections' letters."""
    return "qkvo" if bias is True else (bias or "")


def _llama(bias_key: str | None = "attention_bias", head_dim: bool = True, per_type: tuple[str, ...] = ()):
    """Llama-style config kwargs (``per_type``: RoPE parameters given per layer type, as Olmo 3's
    config keeps them)."""
    def kw(d, H, G, k, frac, bias, theta):
        rope = _rope(frac, theta)
        if per_type:
            rope = {"rope_parameters": {t: rope["rope_parameters"] for t in per_type}}
        out = dict(hidden_size=d, num_attention_heads=H, num_key_value_heads=G, **rope)
        if head_dim:
            out["head_dim"] = k
        if bias_key:
            out[bias_key] = bool(bias)
        return out
    return kw


def _seed_oss(d, H, G, k, frac, bias, theta):
    """SeedOss: attention_bias switches q, k, v; attention_out_bias o."""
    letters = _letters(bias)
    return dict(_llama(None)(d, H, G, k, frac, bias, theta), attention_bias="q" in letters,
                attention_out_bias="o" in letters)


def _gptj(d, H, G, k, frac, bias, theta):
    """GPT-J / CodeGen: rotary_dim rotated dims per head (no biases, positions in a sin/cos table)."""
    return dict(n_embd=d, n_head=H, rotary_dim=int(round(frac * k)))


def _latent(c: LatentAttentionConfig) -> dict[str, Any]:
    return dict(hidden_size=c.d_model, num_attention_heads=c.n_heads, num_key_value_heads=c.n_heads,
                kv_lora_rank=c.kv_latent, q_lora_rank=c.q_latent, qk_nope_head_dim=c.nope_dim,
                qk_rope_head_dim=c.rope_dim, v_head_dim=c.value_dim, attention_bias=c.bias,
                rope_parameters={"rope_type": "default", "rope_theta": c.rope_base})


WINDOWS = ("layer_types", "sliding_window", "use_sliding_window")

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
                       multi_query=G == 1, num_kv_heads=G, **_rope(frac or 1.0, theta))),
    "gpt2": Spec("GPT2Config", "gpt2", "GPT2Attention",
                 lambda d, H, G, k, frac, bias, theta: dict(n_embd=d, n_head=H)),
    "bert": Spec("BertConfig", "bert", "BertAttention",
                 lambda d, H, G, k, frac, bias, theta: dict(hidden_size=d, num_attention_heads=H)),
    "t5": Spec("T5Config", "t5", "T5Attention",
               lambda d, H, G, k, frac, bias, theta: dict(d_model=d, num_heads=H, d_kv=k)),
    "deepseek_v2": Spec("DeepseekV2Config", "deepseek_v2", "DeepseekV2Attention", _latent, latent=True),
    "deepseek_v3": Spec("DeepseekV3Config", "deepseek_v3", "DeepseekV3Attention", _latent, latent=True),
    # -- the attention people run in 2026 (FAMILIES_2026) --------------------------------------
    "bloom": Spec("BloomConfig", "bloom", "BloomAttention",
                  lambda d, H, G, k, frac, bias, theta: dict(hidden_size=d, n_head=H), layers_field="n_layer"),
    "mpt": Spec("MptConfig", "mpt", "MptAttention",
                lambda d, H, G, k, frac, bias, theta: dict(d_model=d, n_heads=H), layers_field="n_layers"),
    "gpt_oss": Spec("GptOssConfig", "gpt_oss", "GptOssAttention", _llama(), structure=WINDOWS),
    "qwen3_next": Spec("Qwen3NextConfig", "qwen3_next", "Qwen3NextAttention", _llama(),
                       structure=("layer_types", "full_attention_interval")),
    "llama4_text": Spec("Llama4TextConfig", "llama4", "Llama4TextAttention", _llama(),
                        structure=("no_rope_layers", "no_rope_layer_interval", "use_qk_norm", "layer_types",
                                   "attention_chunk_size", "attn_temperature_tuning", "floor_scale",
                                   "attn_scale")),
    "smollm3": Spec("SmolLM3Config", "smollm3", "SmolLM3Attention", _llama(),
                    structure=("no_rope_layers", "no_rope_layer_interval") + WINDOWS),
    "cohere2": Spec("Cohere2Config", "cohere2", "Cohere2Attention", _llama(),
                    structure=WINDOWS + ("sliding_window_pattern",)),
    "exaone4": Spec("Exaone4Config", "exaone4", "Exaone4Attention", _llama(None),
                    structure=WINDOWS + ("sliding_window_pattern",)),
    "helium": Spec("HeliumConfig", "helium", "HeliumAttention", _llama()),
    "ernie4_5": Spec("Ernie4_5Config", "ernie4_5", "Ernie4_5Attention", _llama("use_bias")),
    "codegen": Spec("CodeGenConfig", "codegen", "CodeGenAttention", _gptj, heads_multiple=4,
                    layers_field="n_layer"),
    "gptj": Spec("GPTJConfig", "gptj", "GPTJAttention", _gptj, layers_field="n_layer"),
    "ministral": Spec("MinistralConfig", "ministral", "MinistralAttention", _llama(None), structure=WINDOWS),
    "seed_oss": Spec("SeedOssConfig", "seed_oss", "SeedOssAttention", _seed_oss),
    "granitemoe": Spec("GraniteMoeConfig", "granitemoe", "GraniteMoeAttention", _llama()),
    "nemotron": Spec("NemotronConfig", "nemotron", "NemotronAttention", _llama()),
    "olmo3": Spec("Olmo3Config", "olmo3", "Olmo3Attention", _llama(per_type=("sliding_attention", "full_attention")),
                  structure=WINDOWS),
    "cohere": Spec("CohereConfig", "cohere", "CohereAttention", _llama()),
}
# the families of chapter 10 (the attention people run in 2026), Cohere and GPT-J included
FAMILIES_2026 = ("bloom", "mpt", "gpt_oss", "qwen3_next", "llama4_text", "smollm3", "cohere2", "exaone4",
                 "helium", "ernie4_5", "codegen", "gptj", "ministral", "seed_oss", "granitemoe", "nemotron",
                 "olmo3", "cohere")

# families no float64 patch makes measurable (their modules compute in float32 whatever the
# weights' dtype, and float32 round-off (1e-7) in a float64 Jacobian reads as identified
# directions): family -> why.  Cohere and GPT-J were here; their casts are patched now.
FLOAT32_INSIDE: dict[str, str] = {}

# every family: the float32 steps of transformers' shared code, re-evaluated in float64
FLOAT64_EVERYWHERE = (
    "eager attention -> eager64 (softmax in float64; GPT-OSS's sink column too); rotary cos/sin "
    "(and DeepSeek's / Llama 4's complex e^{i t theta}) recomputed in float64 from the module's own "
    "inv_freq and attention_scaling, in the layout its own output has; RMSNorm / L2 norm / "
    "LayerNorm children that upcast to float32 -> RMSNorm64 / LayerNorm64 (checked against the "
    "module's own on a random input)")
# each family's own float32 casts and what replaces them for the duration of one forward
FLOAT64_PATCHES: dict[str, str] = {
    "bloom": "BloomAttention.forward recompiled without the float32 softmax "
             "(F.softmax(attn_weights, dim=-1, dtype=torch.float32) -> F.softmax(attn_weights, dim=-1)); "
             "the ALiBi tensor BloomModel passes (slopes times key position, float32 slopes) built in float64",
    "mpt": "MptAttention.forward recompiled without the float32 softmax "
           "(softmax(attention_scores.float()) -> softmax(attention_scores)); the ALiBi position_bias MptModel "
           "passes (build_mpt_alibi_tensor for max_seq_len, float32) built in float64",
    "falcon": "with alibi: the ALiBi tensor FalconModel passes (bfloat16 slopes) and its mask (ALiBi / sqrt(k) "
              "folded into the causal mask, as FalconModel does) built in float64; the eager ALiBi path "
              "softmaxes in the inputs' dtype, so the module itself is not patched (that path adds ALiBi "
              "twice, in the mask and in the module: slopes 2 m_h / sqrt(k); its sdpa path once)",
    "gpt_oss": "none beyond eager64 (the sink column in float64) and its half-width cos/sin in float64",
    "qwen3_next": "q_norm, k_norm (Qwen3NextRMSNorm, gain 1 + weight, x.float()) -> RMSNorm64",
    "llama4_text": "apply_rotary_emb (view_as_complex(x.float()): complex64) -> the same product in "
                   "complex128, freqs_cis in float64; qk_norm (Llama4TextL2Norm, x.float()) -> weightless "
                   "RMSNorm64 with eps 0",
    "cohere2": "apply_rotary_pos_emb (q.float(), k.float()) -> the same rotation in float64",
    "cohere": "apply_rotary_pos_emb (q.float(), k.float()) -> the same rotation in float64; with "
              "use_qk_norm, q_norm / k_norm (CohereLayerNorm, float32) -> LayerNorm64",
    "exaone4": "q_norm, k_norm (Exaone4RMSNorm, float32) -> RMSNorm64",
    "olmo3": "q_norm, k_norm (Olmo3RMSNorm over all heads, float32) -> RMSNorm64",
    "ernie4_5": "apply_rotary_pos_emb (q.float() * cos + rotate_half(q).float() * sin, GLM-style pairs) "
                "-> the same rotation in float64",
    "codegen": "CodeGenAttention._attn recompiled without query/key .to(torch.float32); the "
               "embed_positions sin/cos table (built in float32) rebuilt in float64",
    "gptj": "GPTJAttention._attn recompiled without query/key .to(torch.float32); the embed_positions "
            "sin/cos table (built in float32) rebuilt in float64",
    "deepseek_v2": "apply_rotary_emb (complex64) -> the same product in complex128",
}


@dataclass
class Built:
    """A family's attention module, its config object and the AttentionConfig idlib reads from it
    (the layer ``layer_idx`` of the config: ``idlib.hf.model_from_hf(...).layer(layer_idx)``)."""

    family: str
    hf_config: Any
    module: torch.nn.Module
    config: AttentionConfig | LatentAttentionConfig
    rotary: torch.nn.Module | None
    layer_idx: int = 0
    own_norms: dict[str, torch.nn.Module] = field(default_factory=dict)   # the replaced children


def _transformers() -> Any:
    """The transformers package (the [hf] extra), imported without tqdm's notebook warning
    ("IProgress not found": transformers imports tqdm.auto, which warns in a notebook without
    ipywidgets; nothing here shows a progress bar)."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="IProgress not found")
            return importlib.import_module("transformers")
    except ImportError:  # pragma: no cover - the pinned environment has it
        raise ConfigError("the real-implementation check needs the 'transformers' package") from None


def _modeling(family: str) -> Any:
    spec = SPECS[family]
    return importlib.import_module(f"transformers.models.{spec.module}.modeling_{spec.module}")


def hf_config(family: str, d: int, H: int, G: int | None = None, k: int | None = None,
              rope_fraction: float = 1.0, bias: Any = False, rope_theta: float = 10000.0,
              **extra: Any) -> Any:
    """The family's own config object for a small layer (``bias``: the family's bias flag, or the
    letters of the biased projections; extra: more config fields, the per-layer structure
    (``layer_types``, ``no_rope_layers``, ...) included; for multi-head latent attention the
    LatentAttentionConfig fields kv_latent, nope_dim, ... go there)."""
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
    try:
        cfg = getattr(transformers, spec.config_class)(**kw)
    except (ValueError, TypeError, ZeroDivisionError) as e:
        raise ConfigError(f"{spec.config_class} refuses the small layer {kw}: {e}") from None
    transformers.AttentionInterface.register(ATTENTION, eager64)
    cfg._attn_implementation = ATTENTION
    return cfg


ATTENTION = "idlib_eager64"
# keyword arguments the modules pass to the attention function that eager64 reads or that do not
# change it (a window or chunk longer than the sequence, a sink column, dropout 0 in eval)
_EAGER_KWARGS = ("dropout", "scaling", "softcap", "sliding_window", "s_aux", "position_bias", "position_ids")


def eager64(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
            attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
            softcap: float | None = None, sliding_window: int | None = None,
            s_aux: torch.Tensor | None = None, position_bias: torch.Tensor | None = None,
            **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' eager attention (grouped K/V, scale, soft-cap, additive mask, softmax) with
    the softmax in the inputs' dtype: eager upcasts it to float32, whose round-off (1e-7) would
    be measured as identified directions in a float64 Jacobian.  ``position_bias`` (T5's) is
    added to the scores as T5's eager attention adds it.  ``s_aux`` (GPT-OSS's sinks): one
    learned logit per head joins each row of the softmax and its column is dropped after it, as
    modeling_gpt_oss.eager_attention_forward does.  A sliding window must not cut the sequence
    (the mask here is the plain causal one); any other keyword with a value is refused."""
    unknown = sorted(k for k, v in kwargs.items() if v is not None and k not in _EAGER_KWARGS)
    if unknown:
        raise ConfigError(f"eager64: {type(module).__name__} passes {unknown}, which eager64 does not "
                          "evaluate")
    if sliding_window is not None and key.shape[-2] > sliding_window:
        raise ConfigError(f"eager64: {key.shape[-2]} keys exceed the sliding window of {sliding_window}")
    m = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(m, dim=1), value.repeat_interleave(m, dim=1)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    w = query @ key.transpose(2, 3) * scaling
    if softcap is not None:
        w = torch.tanh(w / softcap) * softcap
    if position_bias is not None:
        w = w + position_bias
    if attention_mask is not None:
        w = w + attention_mask[:, :, :, : key.shape[-2]]
    if s_aux is not None:
        sinks = s_aux.reshape(1, -1, 1, 1).expand(w.shape[0], -1, w.shape[2], 1)
        w = torch.softmax(torch.cat([w, sinks], dim=-1), dim=-1)[..., :-1]
    else:
        w = torch.softmax(w, dim=-1)
    return (w @ value).transpose(1, 2).contiguous(), w


def _module(family: str, cfg: Any, layer_idx: int) -> tuple[torch.nn.Module, torch.nn.Module | None]:
    spec = SPECS[family]
    mod = _modeling(family)
    cls = getattr(mod, spec.attention)
    params = inspect.signature(cls.__init__).parameters
    kw = {"layer_idx": layer_idx} if "layer_idx" in params else {}
    module = cls(cfg, **kw)
    prefix = spec.attention[: -len("Attention")]
    rot_cls = getattr(mod, prefix + "RotaryEmbedding", None)
    rotary = None
    if rot_cls is not None:
        rotary = rot_cls(config=cfg)
    return module, rotary


def randomize(module: torch.nn.Module, seed: int = 0) -> None:
    """Seeded generic weights: matrices N(0, 1/fan_in), biases N(0, 1/4), norm gains (vectors
    named ``weight``) 1 + N(0, 1/4), other vectors (GPT-OSS's sinks) N(0, 1/4)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            z = torch.randn(p.shape, generator=gen, dtype=torch.float64)
            if p.ndim >= 2 and not name.endswith("norm.weight"):
                p.copy_(z / math.sqrt(p.shape[-1]))
            elif name.endswith("weight"):            # a norm's gain (Cohere's: one per head, 2-D)
                p.copy_(1.0 + 0.5 * z)
            else:                                    # a bias, a sink logit
                p.copy_(0.5 * z)


NORM_EPS_FIELDS = ("rms_norm_eps", "layer_norm_eps")


def build(family: str, seed: int = 0, norm_eps: float = 0.0, layer_idx: int | None = None,
          **layer: Any) -> Built:
    """The family's attention module for a small layer (see :func:`hf_config`), float64, eval.

    ``layer_idx``: the layer whose module is built (its layer type: RoPE or not, QK-norm or not,
    ...), read back as ``model_from_hf(cfg.to_dict()).layer(layer_idx).config``; None: the first
    softmax-attention layer.  ``norm_eps``: the eps of the module's own norms (QK-norm); 0, where
    the count is exact, by default (chapter 9 shows how eps > 0 lifts the scale directions).
    """
    cfg = hf_config(family, **layer)
    for name in NORM_EPS_FIELDS:
        if hasattr(cfg, name):
            setattr(cfg, name, norm_eps)
    model = model_from_hf(cfg.to_dict())
    if layer_idx is None:
        if not model.counted:
            raise ConfigError(f"{family}: no layer of the small config is softmax attention")
        layer_idx = model.counted[0].layers[0]
    try:
        kind = model.layer(layer_idx)
    except IndexError:
        raise ConfigError(f"{family}: layer_idx={layer_idx} of a config with {model.n_layers} layers") from None
    if kind.config is None:
        raise ConfigError(f"{family}: layer {layer_idx} is not counted ({kind.reason})")
    module, rotary = _module(family, cfg, layer_idx)
    module = module.to(torch.float64).eval()
    if rotary is not None:
        rotary = rotary.to(torch.float64)
    randomize(module, seed)
    own = _norms_in_float64(module, norm_eps)
    return Built(family, cfg, module, kind.config, rotary, layer_idx, own)


def _mask(n: int, causal: bool) -> torch.Tensor:
    m = torch.zeros(1, 1, n, n, dtype=torch.float64)
    if causal:
        m = m.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), torch.finfo(torch.float64).min)
    return m


def forward(built: Built, X: torch.Tensor, params: dict[str, torch.Tensor] | None = None,
            float64: bool = True) -> torch.Tensor:
    """The module's own forward on X (B, n, d) -> (B, n, d); ``params`` replaces its parameters.

    ``float64=False``: the module's own path, float32 steps included (its own eager attention,
    norms, rotary output, casts and ALiBi tensors), for comparison.
    """
    module = built.module
    n = X.shape[1]
    pos = torch.arange(n)[None].expand(X.shape[0], n)
    mask = _mask(n, built.config.causal)
    if built.family == "bert":
        def call(x: torch.Tensor) -> torch.Tensor:
            ctx = module.self(x, attention_mask=mask)[0]
            return module.output.dense(ctx)
        target = module_classes().BertWrap(module)
        with (contextlib.nullcontext() if float64 else _own_path(built)):
            if params is None:
                return call(X)
            return torch.func.functional_call(target, params, (X, mask))
    with (patches(built) if float64 else _own_path(built)):
        return _forward(built, X, params, pos, mask, float64)


def _forward(built: Built, X: torch.Tensor, params: dict[str, torch.Tensor] | None,
             pos: torch.Tensor, mask: torch.Tensor, float64: bool = True) -> torch.Tensor:
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
        types_ = getattr(built.hf_config, "layer_types", None)
        layer_type = types_[built.layer_idx] if types_ and "layer_type" in inspect.signature(
            built.rotary.forward).parameters else None
        if float64:
            kw["position_embeddings"] = position_embeddings(built.rotary, X, pos, layer_type)
        else:
            kw["position_embeddings"] = built.rotary(X, pos) if layer_type is None else \
                built.rotary(X, pos, layer_type)
    if built.family == "t5":      # a layer without the relative table (not counted): zero bias
        kw["position_bias"] = torch.zeros(1, built.config.n_heads, n, n, dtype=torch.float64)
    if built.family in _INPUTS:
        kw.update(_INPUTS[built.family](built, X, mask, float64))
    out = module(**kw) if params is None else torch.func.functional_call(module, params, (), kw)
    return out[0]


def position_embeddings(rotary: torch.nn.Module, X: torch.Tensor, pos: torch.Tensor,
                        layer_type: str | None = None) -> Any:
    """(cos, sin) of the family's rotary embedding (or DeepSeek V2's and Llama 4's complex
    e^{i t theta}), evaluated in float64.

    The modules compute cos and sin in float32 (autocast-safe).  Each rotation plane is then
    multiplied by a rounded [[c, -s], [s, c]], still a scaled rotation, so the RoPE commutant
    (a complex scalar per plane) and the count are unchanged; float64 is the clean choice all the
    same (the measured float64 controls: U 40, gap ~1e8, with float32 cos/sin for GPT-OSS's and
    SmolLM3's layouts alike).  The frequencies (``inv_freq``), scaling and pair layout are the
    family's own: the layout (half width: GPT-OSS; halves; interleaved pairs) is read off the
    module's float32 output, cos and sin both.
    """
    pre = "" if layer_type is None else f"{layer_type}_"
    own = rotary(X, pos) if layer_type is None else rotary(X, pos, layer_type)
    freqs = pos[..., None].to(torch.float64) * getattr(rotary, pre + "inv_freq").to(torch.float64)
    scale = float(getattr(rotary, pre + "attention_scaling", 1.0))
    if torch.is_tensor(own) and own.is_complex():            # DeepSeek V2, Llama 4: e^{i t theta}
        exact = torch.polar(torch.full_like(freqs, scale), freqs)
        if not torch.allclose(exact, own.to(torch.complex128), atol=1e-5):
            raise ConfigError(f"{type(rotary).__name__}: unknown rotary layout")
        return exact
    cos32, sin32 = own
    for emb in (freqs, torch.cat([freqs, freqs], dim=-1), torch.repeat_interleave(freqs, 2, dim=-1)):
        if emb.shape == cos32.shape and torch.allclose(emb.cos() * scale, cos32.to(torch.float64), atol=1e-5) \
                and torch.allclose(emb.sin() * scale, sin32.to(torch.float64), atol=1e-5):
            return (emb.cos() * scale).to(torch.float64), (emb.sin() * scale).to(torch.float64)
    raise ConfigError(f"{type(rotary).__name__}: unknown rotary layout")


# -- torch.nn.Module classes -------------------------------------------------------------------
# A class's base must exist when the class is defined, and torch is imported on first use only
# (idlib.lazy): the classes are defined on first use too, once; RMSNorm64 and LayerNorm64 are
# still read as this module's attributes (PEP 562 __getattr__ below).

@functools.cache
def module_classes() -> types.SimpleNamespace:
    """RMSNorm64, LayerNorm64 and BertWrap (defined on the first call, the same classes after)."""
    class RMSNorm64(torch.nn.Module):
        """A family's RMSNorm re-evaluated in float64: gain * y / sqrt(mean(y^2) + eps), the
        gain being ``weight``, ``1 + weight`` (Gemma, Qwen3-Next) or none (Llama 4's L2 norm),
        as the module's own forward computes it (checked on a random input to float32 round-off
        when it is built).  Their forward casts to float32."""

        def __init__(self, norm: torch.nn.Module, one_plus: bool) -> None:
            super().__init__()
            weight = getattr(norm, "weight", None)
            if weight is not None:
                self.weight = weight
            self.eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 0.0)))
            self.one_plus = one_plus

        def forward(self, y: torch.Tensor) -> torch.Tensor:
            out = y / torch.sqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
            if not hasattr(self, "weight"):
                return out
            return (1.0 + self.weight if self.one_plus else self.weight) * out

    class LayerNorm64(torch.nn.Module):
        """A family's LayerNorm (mean subtracted, gain ``weight`` of any shape ending in the
        normalised width, optional ``bias``) re-evaluated in float64: Cohere's QK-norm casts to
        float32."""

        def __init__(self, norm: torch.nn.Module) -> None:
            super().__init__()
            self.weight = norm.weight
            if getattr(norm, "bias", None) is not None:
                self.bias = norm.bias
            self.eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 0.0)))

        def forward(self, y: torch.Tensor) -> torch.Tensor:
            c = y - y.mean(-1, keepdim=True)
            out = self.weight * c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + self.eps)
            return out + self.bias if hasattr(self, "bias") else out

    class BertWrap(torch.nn.Module):
        """BERT's self-attention and its output projection (the block's LayerNorm left out)."""

        def __init__(self, attention: torch.nn.Module) -> None:
            super().__init__()
            self.self_attn = attention.self
            self.dense = attention.output.dense

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return self.dense(self.self_attn(x, attention_mask=mask)[0])

    for cls in (RMSNorm64, LayerNorm64, BertWrap):
        cls.__qualname__ = cls.__name__
    return types.SimpleNamespace(RMSNorm64=RMSNorm64, LayerNorm64=LayerNorm64, BertWrap=BertWrap)


def __getattr__(name: str) -> Any:
    """PEP 562: RMSNorm64 and LayerNorm64, the classes of :func:`module_classes`."""
    if name in ("RMSNorm64", "LayerNorm64"):
        return getattr(module_classes(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _norms_in_float64(module: torch.nn.Module, eps: float = 0.0) -> dict[str, torch.nn.Module]:
    """Replace every RMSNorm / L2Norm child by :class:`RMSNorm64` and every LayerNorm child that
    is not torch's own by :class:`LayerNorm64` (same parameters, same function), with ``eps``
    (the modules' own eps where they take it from the config; DeepSeek's latent norms keep the
    class default 1e-6 whatever the config says, so it is set here).  Returns the replaced
    children by name (the module's own path, ``forward(..., float64=False)``, puts them back)."""
    own: dict[str, torch.nn.Module] = {}
    for name, child in list(module.named_children()):
        kind = type(child).__name__
        if kind.endswith(("RMSNorm", "L2Norm")):
            forms = [module_classes().RMSNorm64(child, one_plus) for one_plus in (False, True)]
        elif kind.endswith("LayerNorm") and not isinstance(child, torch.nn.LayerNorm):
            forms = [module_classes().LayerNorm64(child)]
        else:
            continue
        weight = getattr(child, "weight", None)
        shape = (3, 8) if weight is None else (3, *weight.shape)
        y = torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            theirs = child(y)
            for new in forms:
                if torch.allclose(new(y), theirs, rtol=1e-5, atol=1e-5):
                    new.eps = eps
                    for attr in ("variance_epsilon", "eps"):    # the own path: the same eps
                        if hasattr(child, attr):
                            setattr(child, attr, eps)
                    setattr(module, name, new)
                    own[name] = child
                    break
            else:
                raise ConfigError(f"{kind}: not a norm of a known form")
    return own


def parameters(built: Built) -> dict[str, torch.Tensor]:
    """The parameters the layer function depends on, by the module's own names."""
    if built.family == "bert":
        return {k: v.detach() for k, v in module_classes().BertWrap(built.module).named_parameters()}
    return {k: v.detach() for k, v in built.module.named_parameters()}


# -- the patches: each family's float32 casts, replaced for the duration of one forward ----------

@contextlib.contextmanager
def _swap(owner: Any, name: str, new: Any) -> Iterator[None]:
    """``owner.name = new`` for the duration of the block (restored after it, also on error)."""
    old = getattr(owner, name)
    setattr(owner, name, new)
    try:
        yield
    finally:
        setattr(owner, name, old)


@functools.lru_cache(maxsize=None)
def _recompiled(cls: type, meth: str, replacements: tuple[tuple[str, str], ...]) -> Callable[..., Any]:
    """``cls.meth`` compiled again from its own source with exact textual replacements (each must
    occur exactly once), in its module's namespace (a copy): the same method without its cast."""
    fn = getattr(cls, meth)
    lines = textwrap.dedent(inspect.getsource(fn)).splitlines()
    while lines[0].lstrip().startswith("@"):
        lines.pop(0)
    src = "\n".join(lines) + "\n"
    for old, new in replacements:
        if src.count(old) != 1:
            raise ConfigError(f"{cls.__name__}.{meth}: {old!r} occurs {src.count(old)} times in its "
                              "source (transformers changed; the float64 patch must be revised)")
        src = src.replace(old, new)
    namespace = dict(sys.modules[fn.__module__].__dict__)
    exec(compile(src, f"<{cls.__name__}.{meth} in float64>", "exec"), namespace)
    return namespace[fn.__name__]


@contextlib.contextmanager
def _method(module: torch.nn.Module, meth: str, *replacements: tuple[str, str]) -> Iterator[None]:
    """This module instance's ``meth`` recompiled with ``replacements`` for the duration of the
    block (an instance attribute, deleted after it: the class is never touched)."""
    module.__dict__[meth] = types.MethodType(_recompiled(type(module), meth, replacements), module)
    try:
        yield
    finally:
        del module.__dict__[meth]


def _rotate_pairs(x: torch.Tensor) -> torch.Tensor:
    """(x_0, x_1, x_2, x_3, ...) -> (-x_1, x_0, -x_3, x_2, ...): rotation of the pairs (2i, 2i+1)."""
    return torch.stack([-x[..., 1::2], x[..., ::2]], dim=-1).flatten(-2)


def _apply_pairs64(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Cohere's / Cohere2's apply_rotary_pos_emb (pairs (2i, 2i+1), interleaved cos/sin) without
    its q.float() / k.float()."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + _rotate_pairs(q) * sin, k * cos + _rotate_pairs(k) * sin


def _apply_glm_pairs64(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                       unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """ERNIE 4.5's apply_rotary_pos_emb (first half of cos/sin repeat-interleaved, pairs
    (2i, 2i+1)) without its .float() casts."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
    sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)
    rot = importlib.import_module("transformers.models.ernie4_5.modeling_ernie4_5").rotate_half
    return q * cos + rot(q) * sin, k * cos + rot(k) * sin


def _apply_rotary_emb64(xq: torch.Tensor, xk: torch.Tensor,
                        freqs_cis: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepseekV2's apply_rotary_emb (pairs (2i, 2i+1) as complex numbers times e^{i t theta_i})
    in complex128: its own casts the pairs to complex64 (``xq.float()``)."""
    xq_ = torch.view_as_complex(xq.reshape(*xq.shape[:-1], -1, 2).contiguous())
    xk_ = torch.view_as_complex(xk.reshape(*xk.shape[:-1], -1, 2).contiguous())
    f = freqs_cis.unsqueeze(1)
    return torch.view_as_real(xq_ * f).flatten(3), torch.view_as_real(xk_ * f).flatten(3)


def _apply_rotary_emb_llama4(xq: torch.Tensor, xk: torch.Tensor,
                             freqs_cis: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Llama 4's apply_rotary_emb (queries and keys (B, n, heads, k), pairs (2i, 2i+1) as complex
    numbers) in complex128: its own casts them to complex64 (``xq.float()``)."""
    xq_ = torch.view_as_complex(xq.reshape(*xq.shape[:-1], -1, 2).contiguous())
    xk_ = torch.view_as_complex(xk.reshape(*xk.shape[:-1], -1, 2).contiguous())
    f = freqs_cis[:, :, None, :]
    return torch.view_as_real(xq_ * f).flatten(3), torch.view_as_real(xk_ * f).flatten(3)


@contextlib.contextmanager
def _complex128_rotation() -> Iterator[None]:
    """DeepseekV2's module-level apply_rotary_emb replaced by :func:`_apply_rotary_emb64` for the
    duration of one forward (restored after it)."""
    with _swap(importlib.import_module("transformers.models.deepseek_v2.modeling_deepseek_v2"),
               "apply_rotary_emb", _apply_rotary_emb64):
        yield


def _sincos64(module: torch.nn.Module) -> torch.Tensor:
    """GPT-J's / CodeGen's create_sinusoidal_positions (sin | cos of position times
    10000^(-2i/dim)) in float64, for the module's table size."""
    dim = module.pos_embd_dim
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    angle = torch.arange(module.embed_positions.shape[0], dtype=torch.float64)[:, None] * inv
    return torch.cat([angle.sin(), angle.cos()], dim=1)


def _gptj_patch(built: Built) -> Any:
    stack = contextlib.ExitStack()
    stack.enter_context(_method(built.module, "_attn", ("query = query.to(torch.float32)", "query = query"),
                                ("key = key.to(torch.float32)", "key = key")))
    stack.enter_context(_swap(built.module, "embed_positions", _sincos64(built.module)))
    return stack


_PATCHERS: dict[str, Callable[[Built], Any]] = {
    "bloom": lambda b: _method(b.module, "forward", (
        "F.softmax(attn_weights, dim=-1, dtype=torch.float32)", "F.softmax(attn_weights, dim=-1)")),
    "mpt": lambda b: _method(b.module, "forward", (
        "nn.functional.softmax(attention_scores.float(), dim=-1)",
        "nn.functional.softmax(attention_scores, dim=-1)")),
    "llama4_text": lambda b: _swap(_modeling("llama4_text"), "apply_rotary_emb", _apply_rotary_emb_llama4),
    "cohere2": lambda b: _swap(_modeling("cohere2"), "apply_rotary_pos_emb", _apply_pairs64),
    "cohere": lambda b: _swap(_modeling("cohere"), "apply_rotary_pos_emb", _apply_pairs64),
    "ernie4_5": lambda b: _swap(_modeling("ernie4_5"), "apply_rotary_pos_emb", _apply_glm_pairs64),
    "codegen": _gptj_patch,
    "gptj": _gptj_patch,
    "deepseek_v2": lambda b: _complex128_rotation(),
}


def patches(built: Built) -> Any:
    """The family's float64 patches (:data:`FLOAT64_PATCHES`) as one context manager: entered,
    they hold; left, everything they changed is back."""
    patcher = _PATCHERS.get(built.family)
    return contextlib.nullcontext() if patcher is None else patcher(built)


@contextlib.contextmanager
def _own_path(built: Built) -> Iterator[None]:
    """The module's own float32 path for the duration of the block: its own norms and eager
    attention (restored after it)."""
    module, cfg = built.module, built.hf_config
    with contextlib.ExitStack() as stack:
        for name, child in built.own_norms.items():
            stack.enter_context(_swap(module, name, child))
        stack.enter_context(_swap(cfg, "_attn_implementation", "eager"))
        yield


# -- the position inputs a family's model passes to its attention (ALiBi) ------------------------

def alibi_slopes(H: int) -> torch.Tensor:
    """BLOOM's and Falcon's ALiBi slopes (_get_alibi_slopes / build_alibi_tensor) in float64:
    2^(-8 i / c) for the c = 2^floor(log2 H) first heads, then every other slope of 2c heads."""
    c = 2 ** math.floor(math.log2(H))
    base = 2.0 ** (-(2.0 ** -(math.log2(c) - 3)))
    slopes = [base ** p for p in range(1, c + 1)]
    if c != H:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * c) - 3)))
        slopes += [extra ** p for p in range(1, 1 + 2 * min(c, H - c), 2)]
    return torch.tensor(slopes, dtype=torch.float64)


def mpt_alibi(H: int, length: int, alibi_bias_max: float = 8.0) -> torch.Tensor:
    """MPT's build_mpt_alibi_tensor(H, length) in float64: (H, 1, length), slope times
    (key position - (length - 1))."""
    P2 = 2 ** math.ceil(math.log2(H))
    slopes = 1.0 / torch.pow(2.0, torch.arange(1, P2 + 1, dtype=torch.float64) * (alibi_bias_max / P2))
    if P2 != H:
        slopes = torch.cat([slopes[1::2], slopes[::2]])[:H]
    return slopes[:, None, None] * torch.arange(1 - length, 1, dtype=torch.float64)[None, None, :]


def _bloom_inputs(built: Built, X: torch.Tensor, mask: torch.Tensor, float64: bool) -> dict[str, Any]:
    """BloomModel without padding: alibi = slope * key position, (B H, 1, n), and a zero residual
    (the module adds it to its output)."""
    B, n, H = X.shape[0], X.shape[1], built.config.n_heads
    slopes = alibi_slopes(H) if float64 else \
        _modeling("bloom")._get_alibi_slopes(H, X.device).to(torch.float64)
    alibi = slopes[:, None, None] * torch.arange(n, dtype=torch.float64)
    return {"alibi": alibi.repeat(B, 1, 1), "residual": torch.zeros_like(X)}


def _mpt_inputs(built: Built, X: torch.Tensor, mask: torch.Tensor, float64: bool) -> dict[str, Any]:
    """MptModel: the ALiBi built for max_seq_len (the module keeps the last n keys) and a boolean
    causal mask (the module fills it with finfo.min)."""
    H, L = built.config.n_heads, built.hf_config.max_seq_len
    alibi = mpt_alibi(H, L, built.hf_config.attn_config.alibi_bias_max) if float64 else \
        _modeling("mpt").build_mpt_alibi_tensor(H, L, built.hf_config.attn_config.alibi_bias_max)
    return {"position_bias": alibi, "attention_mask": mask < -1}


def _falcon_inputs(built: Built, X: torch.Tensor, mask: torch.Tensor, float64: bool) -> dict[str, Any]:
    """FalconModel with alibi: alibi = slope * key position, (B H, 1, n), and the causal mask with
    ALiBi / sqrt(k) folded in (FalconModel does both; the eager path adds the two)."""
    if not built.config.alibi:
        return {}
    B, n, H = X.shape[0], X.shape[1], built.config.n_heads
    if float64:
        alibi = (alibi_slopes(H)[:, None, None] * torch.arange(n, dtype=torch.float64)).repeat(B, 1, 1)
    else:
        alibi = _modeling("falcon").build_alibi_tensor(torch.ones(B, n, dtype=torch.long), H, torch.float64)
    folded = torch.masked_fill(alibi.reshape(B, H, 1, n) / math.sqrt(built.config.head_dim), mask < -1,
                               torch.finfo(torch.float64).min)
    return {"alibi": alibi, "attention_mask": folded}


_INPUTS: dict[str, Callable[[Built, torch.Tensor, torch.Tensor, bool], dict[str, Any]]] = {
    "bloom": _bloom_inputs, "mpt": _mpt_inputs, "falcon": _falcon_inputs}


# -- small layers --------------------------------------------------------------------------------

# families whose modules fix head_dim = hidden_size / heads (Helium: its o_proj is hidden x hidden)
HEAD_DIM_FIXED = {"phi", "phi3", "stablelm", "persimmon", "gpt_neox", "falcon", "gpt2", "bert",
                  "bloom", "mpt", "codegen", "gptj", "helium"}


def small_layer(config: AttentionConfig, family: str, widths: range = range(8, 65),
                rope_fraction: float | None = None) -> dict[str, Any]:
    """Keyword arguments of :func:`build` for a small layer with the structure of ``config``:
    group size m (at most 4) and two groups (one where that gives a narrower d; more where the
    family's module needs a multiple of heads, CodeGen's 4), the rotary share, biases (the
    family's flag, or the letters), ALiBi, QK-norm and causality come from the family's config;
    the smallest width whose layer has a derived count (``idlib.counting.check_derived``: e.g.
    H k <= d for a norm over all heads) wins, head_dim = d / H where the module fixes it.

    ``rope_fraction``: the rotary share the small config gets (and its head_dim must allow),
    when it differs from the layer's (a NoPE layer of a model whose other layers rotate).
    """
    G = min(config.n_kv_heads, 2)
    m = min(config.group_size, 4)
    if config.group_size == 1:
        G, m = min(config.n_heads, 2), 1
    multiple = SPECS[family].heads_multiple if family in SPECS else 1
    groups = sorted({G, 1}, reverse=True)
    if any(g * m % multiple for g in groups):
        groups = [multiple // math.gcd(m, multiple)]
    frac = config.rope_fraction if rope_fraction is None else rope_fraction
    fixed = family in HEAD_DIM_FIXED
    for d in widths:
        for G_ in groups:                            # two groups, else one (a narrower d)
            H = G_ * m
            if fixed and d % H:
                continue
            ks = [d // H] if fixed or d % H == 0 else []
            if not fixed:
                ks += [k for k in range(2, d + 1) if k not in ks]
            for k in ks:
                if k < 1:
                    continue
                r = frac * k
                if abs(r - round(r)) > 1e-9 or round(r) % 2 or (frac and not round(r)):
                    continue
                try:
                    check_derived(config.replace(d_model=d, n_heads=H, n_kv_heads=G_, head_dim=k, value_dim=k))
                except ConfigError:
                    continue
                out = dict(d=d, H=H, G=G_, k=k, rope_fraction=frac, bias=config.bias,
                           rope_theta=config.rope_base)
                if config.alibi and family == "falcon":
                    out["alibi"] = True
                return out
    raise ConfigError(f"no small layer of family {family!r} with the structure of {config}")


# the small latent layer of chapter 9 and the tests (d, H, C, n, p, v); a query latent has 6 dims
SMALL_LATENT = dict(d=12, H=2, kv_latent=5, nope_dim=3, rope_dim=4, value_dim=3)


def small_latent_layer(config: LatentAttentionConfig) -> dict[str, Any]:
    """Keyword arguments of :func:`build` for a small latent layer with the structure of
    ``config`` (a query latent or none, the biases, the RoPE base): :data:`SMALL_LATENT`, C_Q 6."""
    return dict(SMALL_LATENT, q_latent=None if config.q_latent is None else 6, bias=config.bias,
                rope_theta=config.rope_base)
