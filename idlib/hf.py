"""Translate a Hugging Face ``config.json`` into AttentionConfig fields, never guessing.

Every family the reader knows is one row of :data:`FAMILIES`: how it encodes positions, which
flag puts biases on which projections, its query/key norm, whether it is causal, and the
defaults its ``transformers`` config class (5.23) fills in when a field is absent.  A field
missing from a config takes that default, exactly as ``transformers`` would.  Both layouts
are read: transformers 5 (``rope_parameters`` with ``rope_theta`` and ``partial_rotary_factor``,
per layer type or not; ``text_config`` of multimodal models) and the older ones
(``rope_theta``, ``partial_rotary_factor``, ``rotary_pct``, ``rotary_dim``, ``d_kv``, ...).

Refused, with the rule named (never guessed): an unknown ``model_type`` (say what it is with
``family=``), a field whose value changes the attention function in a way the count does not
derive (ALiBi, relative-key positions, clipped q/k/v, per-layer RoPE switches, ...), and any
attention-looking field (name matching :data:`_SUSPECT`) that is not in the family's list of
read fields or in :data:`HARMLESS` (fields that provably leave the count unchanged, each with
its reason).

Multi-head latent attention (DeepSeek V2, V3) is not an AttentionConfig layer:
:func:`latent_fields_from_hf` reads it into a :class:`~idlib.config.LatentAttentionConfig`, and
:func:`config_from_hf` returns whichever of the two the config describes.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from .config import AttentionConfig, ConfigError, LatentAttentionConfig, read_json
from .counting import count


@dataclass(frozen=True)
class Family:
    """What the attention code of one ``model_type`` does with its config (transformers 5.23)."""

    positions: str = "rope"                 # "rope" | "learned" | "relative" (T5's bucket bias)
    bias: str = ""                          # biases that are always there
    bias_flags: tuple[tuple[str, str, bool], ...] = ()   # (field, letters it switches, default)
    kv_default: int | None = None           # num_key_value_heads when absent (None: = heads)
    head_dim_default: int | None = None     # head_dim when absent (None: hidden / heads)
    rope_fraction: float = 1.0              # partial_rotary_factor when absent
    rope_theta: float = 10000.0             # rope_theta when absent
    qk_norm: str = "none"                   # an AttentionConfig qk_norm, or "latent" (MLA)
    causal: bool = True
    softcap: float | None = None            # attn_logit_softcapping when absent
    reads: tuple[str, ...] = ()             # family-specific fields it reads (beyond the common ones)
    partial: bool = False                   # its code rotates only part of each head when asked
    note: str = ""


_LLAMA_BIAS = (("attention_bias", "qkvo", False),)
LATENT_READS = ("attention_bias", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                "v_head_dim", "qk_head_dim")
FAMILIES: dict[str, Family] = {
    "llama": Family(bias_flags=_LLAMA_BIAS),
    "mistral": Family(kv_default=8),
    "mixtral": Family(kv_default=8, rope_theta=1e6),
    "granite": Family(bias_flags=_LLAMA_BIAS, reads=("attention_multiplier",)),
    "smollm3": Family(bias_flags=_LLAMA_BIAS, kv_default=4, rope_theta=2e6,
                      reads=("no_rope_layers", "no_rope_layer_interval")),
    "qwen2": Family(bias="qkv", kv_default=32, reads=("qkv_bias",),
                    note="q, k, v always biased, o never (a qkv_bias field is ignored by the code)"),
    "qwen2_vl_text": Family(bias="qkv", kv_default=8, rope_theta=1e6, reads=("mrope_section",),
                            note="q, k, v always biased; M-RoPE equals RoPE on text tokens"),
    "qwen2_5_vl_text": Family(bias="qkv", kv_default=8, rope_theta=1e6, reads=("mrope_section",),
                              note="as Qwen2-VL"),
    "qwen2_moe": Family(bias_flags=(("qkv_bias", "qkv", True),), kv_default=16),
    "qwen3": Family(bias_flags=_LLAMA_BIAS, kv_default=32, head_dim_default=128, qk_norm="gain"),
    "qwen3_moe": Family(bias_flags=_LLAMA_BIAS, kv_default=4, qk_norm="gain"),
    "gemma": Family(bias_flags=_LLAMA_BIAS, kv_default=16, head_dim_default=256,
                    reads=("use_bidirectional_attention",)),
    "gemma2": Family(bias_flags=_LLAMA_BIAS, kv_default=4, head_dim_default=256, softcap=50.0,
                     reads=("attn_logit_softcapping", "query_pre_attn_scalar",
                            "use_bidirectional_attention")),
    "gemma3_text": Family(bias_flags=_LLAMA_BIAS, kv_default=4, head_dim_default=256, qk_norm="gain",
                          reads=("attn_logit_softcapping", "query_pre_attn_scalar",
                                 "use_bidirectional_attention", "rope_local_base_freq")),
    "phi": Family(bias="qkvo", rope_fraction=0.5, reads=("qk_layernorm",), partial=True),
    "phi3": Family(partial=True),
    "persimmon": Family(bias="qkvo", rope_fraction=0.5, qk_norm="layernorm", reads=("qk_layernorm",),
                        partial=True),
    "stablelm": Family(bias_flags=(("use_qkv_bias", "qkv", False),), kv_default=32,
                       rope_fraction=0.25, reads=("qk_layernorm",), partial=True),
    "gpt_neox": Family(bias_flags=(("attention_bias", "qkvo", True),), rope_fraction=0.25,
                       reads=("rotary_emb_base",), partial=True),
    "gptj": Family(reads=("rotary_dim",), partial=True,
                   note="rotary_dim rotated dims per head (interleaved pairs)"),
    "falcon": Family(bias_flags=(("bias", "qkvo", False),),
                     reads=("multi_query", "new_decoder_architecture", "num_kv_heads", "alibi")),
    "olmo": Family(bias_flags=_LLAMA_BIAS, reads=("clip_qkv",)),
    "olmo2": Family(bias_flags=_LLAMA_BIAS, qk_norm="whole"),
    "olmo3": Family(bias_flags=_LLAMA_BIAS, qk_norm="whole", rope_theta=500000.0),
    "olmoe": Family(bias_flags=_LLAMA_BIAS, qk_norm="whole", reads=("clip_qkv",)),
    "cohere": Family(bias_flags=_LLAMA_BIAS, rope_theta=500000.0, reads=("use_qk_norm", "logit_scale"),
                     note="interleaved RoPE pairs"),
    "starcoder2": Family(bias_flags=(("use_bias", "qkvo", True),), kv_default=2),
    "glm": Family(bias_flags=(("attention_bias", "qkv", True),), kv_default=2, head_dim_default=128,
                  rope_fraction=0.5, partial=True, note="attention_bias switches q, k, v; o is never biased"),
    "glm4": Family(bias_flags=(("attention_bias", "qkv", True),), kv_default=2, head_dim_default=128,
                   rope_fraction=0.5, partial=True, note="as GLM"),
    "deepseek_v2": Family(qk_norm="latent", reads=LATENT_READS,
                          note="multi-head latent attention (idlib.config.LatentAttentionConfig)"),
    "deepseek_v3": Family(kv_default=128, qk_norm="latent", reads=LATENT_READS + ("rope_interleave",),
                          note="multi-head latent attention (idlib.config.LatentAttentionConfig)"),
    "gpt2": Family(positions="learned", bias="qkvo",
                   reads=("scale_attn_weights", "scale_attn_by_inverse_layer_idx",
                          "reorder_and_upcast_attn")),
    "gpt_neo": Family(positions="learned", bias="o", reads=("attention_types", "attention_layers"),
                      note="only the output projection is biased; local layers are windowed"),
    "gpt_bigcode": Family(positions="learned", bias="qkvo", reads=("multi_query",)),
    "opt": Family(positions="learned", bias_flags=(("enable_bias", "qkvo", True),)),
    "bert": Family(positions="learned", bias="qkvo", causal=False,
                   reads=("position_embedding_type", "is_decoder"), note="causal when is_decoder"),
    "roberta": Family(positions="learned", bias="qkvo", causal=False, reads=("position_embedding_type",)),
    "xlm-roberta": Family(positions="learned", bias="qkvo", causal=False,
                          reads=("position_embedding_type",)),
    "electra": Family(positions="learned", bias="qkvo", causal=False, reads=("position_embedding_type",)),
    "distilbert": Family(positions="learned", bias="qkvo", causal=False),
    "t5": Family(positions="relative", causal=False, reads=("d_kv",),
                 note="encoder self-attention; the relative-position bucket bias is a separate "
                      "table added to the scores, not counted"),
}
# multimodal configs: the family of a text_config that does not name its own model_type
TEXT_FAMILY = {"gemma3": "gemma3_text", "qwen2_vl": "qwen2_vl_text", "qwen2_5_vl": "qwen2_5_vl_text",
               "llava": "llama", "llava_next": "llama", "mistral3": "mistral", "paligemma": "gemma"}
# the model_type of a text_config names the text model; some spell it as the multimodal one
TEXT_ALIASES = {"gemma3": "gemma3_text", "qwen2_vl": "qwen2_vl_text", "qwen2_5_vl": "qwen2_5_vl_text"}

# families whose QK LayerNorm is one nn.LayerNorm(head_dim) (gain and shift) shared by the heads;
# StableLM and Cohere normalise each head with its own gains and no shift ("layernorm")
LAYERNORM_SHARED = ("phi", "persimmon")
# DeepseekV2Config / DeepseekV3Config defaults (transformers 5.23) of the latent fields
LATENT_DEFAULTS = {"kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
                   "qk_rope_head_dim": 64, "v_head_dim": 128}

# fields every family reads (sizes, positions, the common flags)
COMMON_READS = ("model_type", "hidden_size", "n_embd", "d_model", "num_attention_heads", "n_head",
                "num_heads", "num_key_value_heads", "head_dim", "rope_theta", "rope_parameters",
                "rope_scaling", "partial_rotary_factor", "rotary_pct", "text_config",
                "num_hidden_layers", "n_layer", "num_layers")
# attention-looking fields that provably leave the count unchanged, with the reason
HARMLESS = {
    "attention_dropout": "dropout is off in evaluation",
    "attn_pdrop": "dropout is off in evaluation",
    "attention_probs_dropout_prob": "dropout is off in evaluation",
    "hidden_dropout_prob": "dropout is off in evaluation",
    "resid_pdrop": "dropout is off in evaluation",
    "max_position_embeddings": "a length limit, not a change of the function",
    "n_positions": "a length limit (learned position table), not a change of the function",
    "original_max_position_embeddings": "a length limit of the RoPE scaling",
    "sliding_window": "a window of w >= 2 keys: sequences shorter than w see full causal attention, "
                      "and the count is reached on them (the symmetries act position by position)",
    "use_sliding_window": "see sliding_window", "max_window_layers": "see sliding_window",
    "layer_types": "sliding or full attention per layer (see sliding_window)",
    "sliding_window_pattern": "see sliding_window", "_sliding_window_pattern": "see sliding_window",
    "window_size": "see sliding_window",
    "rms_norm_eps": "the block's norms (outside the attention layer; chapter 9 for QK-norm eps)",
    "layer_norm_eps": "the block's norms", "layer_norm_epsilon": "the block's norms",
    "norm_epsilon": "the block's norms",
    "mlp_bias": "the MLP, not attention", "use_parallel_residual": "the block, not attention",
    "parallel_attn": "the block, not attention",
    "apply_residual_connection_post_layernorm": "the block, not attention",
    "post_norm": "the block, not attention", "use_post_norm": "the block, not attention", "num_ln_in_parallel_attn": "the block, not attention",
    "head_dim": "read", "pretraining_tp": "a tensor-parallel slicing of the same matrices",
    "type_vocab_size": "token-type embeddings, not attention",
    "num_nextn_predict_layers": "extra prediction layers, not this layer",
    "first_k_dense_replace": "MLP kind per layer", "moe_layer_freq": "MLP kind per layer",
    "decoder_sparse_step": "MLP kind per layer", "mlp_only_layers": "MLP kind per layer",
    "norm_topk_prob": "MoE routing", "routed_scaling_factor": "MoE routing",
    "logits_scaling": "the LM head", "embedding_multiplier": "embeddings", "final_logit_softcapping": "the LM head, not attention",
    "tie_word_embeddings": "embeddings", "is_decoder": "read through the family",
    "scale_attn_weights": "a fixed score scale: the count is the same for every nonzero scale",
    "scale_attn_by_inverse_layer_idx": "a fixed score scale per layer",
    "reorder_and_upcast_attn": "numerics only",
    "query_pre_attn_scalar": "a fixed score scale",
    "attention_multiplier": "a fixed score scale", "logit_scale": "the LM head's logits",
    "rope_local_base_freq": "the local layers' RoPE base (checked to give the same count)",
    "rope_interleave": "interleaved pairs: a fixed permutation of each head's dims",
    "mrope_section": "M-RoPE: on text tokens its three position ids coincide, plain RoPE",
    "attention_types": "global or local (windowed) layers, see sliding_window",
    "attention_layers": "see attention_types",
    "no_rope_layer_interval": "read with no_rope_layers",
    "relative_attention_num_buckets": "T5's position table (not counted)",
    "relative_attention_max_distance": "T5's position table (not counted)",
    "qk_head_dim": "qk_nope_head_dim + qk_rope_head_dim",
    "use_bidirectional_attention": "read",
    "num_kv_heads": "read", "n_head_kv": "read", "multi_query": "read", "n_heads": "read",
    "output_attentions": "what the forward returns, not what it computes",
    "add_cross_attention": "adds a separate cross-attention layer; this is the self-attention",
    "scale_decoder_outputs": "the LM head", "do_layer_norm_before": "the block, not attention",
    "layer_norm_elementwise_affine": "the block's norms",
    "attention_softmax_in_fp32": "numerics only", "scale_attention_softmax_in_fp32": "numerics only",
}
# a field whose name looks like it could shape attention must be read or listed in HARMLESS
_SUSPECT = re.compile(r"attn|attention|rope|rotary|qk|alibi|position|bias|softcap|head|window|"
                      r"causal|clip|lora|kv|norm|scal")


def _number(data: dict[str, Any], name: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name}: field {key!r}={value!r} must be a finite number")
    return float(value)


def _integer(name: str, key: str, value: Any) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name}: field {key!r}={value!r} must be an integer")
    return value


def _flag(data: dict[str, Any], name: str, key: str, default: bool) -> bool:
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{name}: field {key!r}={value!r} must be true or false")
    return value


def _get(data: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in data and data[k] is not None:
            return data[k]
    return default


def text_part(data: Any, name: str = "config") -> tuple[dict[str, Any], str]:
    """(the dict describing the text model, its model_type) of a config, text_config resolved."""
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: a Hugging Face config must be a JSON object")
    outer = str(data.get("model_type") or "").lower()
    if "text_config" in data and "hidden_size" not in data:
        inner = data["text_config"]
        if not isinstance(inner, dict):
            raise ConfigError(f"{name}: field 'text_config' must be a JSON object "
                              f"(got {type(inner).__name__})")
        mt = str(inner.get("model_type") or "").lower()
        return inner, TEXT_ALIASES.get(mt, mt) or TEXT_FAMILY.get(outer, "")
    return data, outer


def family_of(data: Any, name: str = "config", family: str | None = None) -> tuple[dict[str, Any], str, Family]:
    """(text dict, family name, Family); an unknown model_type is refused unless ``family`` names one."""
    text, mt = text_part(data, name)
    if family is not None:
        key = str(family).lower()
        if key not in FAMILIES:
            raise ConfigError(f"family={family!r} is not a known family (known: {', '.join(sorted(FAMILIES))})")
        return text, key, FAMILIES[key]
    if mt not in FAMILIES:
        what = f"model_type {mt!r}" if mt else "no model_type"
        raise ConfigError(f"{name}: {what} is not a family the reader knows; the attention function "
                          "is never guessed (name the family with --family, e.g. --family llama, "
                          f"if it is one of: {', '.join(sorted(FAMILIES))})")
    return text, mt, FAMILIES[mt]


def _rope(text: dict[str, Any], fam: Family, name: str) -> tuple[float, list[float]]:
    """(rotary fraction, RoPE bases of the layer types) from either layout."""
    params = text.get("rope_parameters")
    if params is None and isinstance(text.get("rope_scaling"), dict):
        params = None          # old layout: rope_scaling only rescales frequencies (see table)
    fraction = _get(text, "partial_rotary_factor", "rotary_pct")
    key = "partial_rotary_factor" if "partial_rotary_factor" in text else "rotary_pct"
    thetas: list[float] = []
    if params is not None:
        if not isinstance(params, dict):
            raise ConfigError(f"{name}: field 'rope_parameters' must be a JSON object")
        per_type = [params] if "rope_theta" in params or "rope_type" in params else list(params.values())
        fracs = set()
        for p in per_type:
            if not isinstance(p, dict):
                raise ConfigError(f"{name}: field 'rope_parameters' must map layer types to objects")
            if "rope_theta" in p:
                thetas.append(_number(p, name, "rope_parameters.rope_theta", p["rope_theta"]))
            if p.get("partial_rotary_factor") is not None:
                fracs.add(_number(p, name, "rope_parameters.partial_rotary_factor",
                                  p["partial_rotary_factor"]))
        if len(fracs) > 1:
            raise ConfigError(f"{name}: layer types rotate different shares {sorted(fracs)}; count "
                              "one layer type at a time")
        if fracs:
            fraction, key = fracs.pop(), "rope_parameters.partial_rotary_factor"
    if not thetas:
        t = _get(text, "rope_theta", "rotary_emb_base")
        thetas = [fam.rope_theta if t is None else _number(text, name, "rope_theta", t)]
    if "rope_local_base_freq" in text:
        thetas.append(_number(text, name, "rope_local_base_freq", text["rope_local_base_freq"]))
    fraction = fam.rope_fraction if fraction is None else _number(text, name, key, fraction)
    return fraction, thetas


def _check_unread(text: dict[str, Any], fam: Family, name: str) -> None:
    known = set(COMMON_READS) | set(HARMLESS) | set(fam.reads) | {f for f, _, _ in fam.bias_flags}
    for key in sorted(text):
        if key.startswith("_") or key in known or not _SUSPECT.search(key):
            continue
        raise ConfigError(f"{name}: field {key!r} is not read for this family and could change the "
                          "attention function; it is refused, never ignored")


def _refusals(text: dict[str, Any], fam: Family, family: str, name: str) -> None:
    pos = str(text.get("position_embedding_type") or "absolute").lower()
    if text.get("alibi") or pos == "alibi":
        raise ConfigError(f"{name}: ALiBi position biases are not represented by AttentionConfig")
    if pos not in ("absolute", "rotary", "rope"):
        raise ConfigError(f"{name}: field 'position_embedding_type'={pos!r}: relative position "
                          "scores are not represented by AttentionConfig")
    if text.get("clip_qkv") is not None:
        raise ConfigError(f"{name}: field 'clip_qkv'={text['clip_qkv']!r} clamps q, k, v; the count "
                          "of a clipped layer is not derived")
    layers = text.get("no_rope_layers")
    if family == "smollm3" and layers is None:
        layers = [1, 1, 1, 0]          # SmolLM3Config's default: every 4th layer without RoPE
    if layers is not None and (not isinstance(layers, list) or len(set(map(bool, layers))) > 1):
        raise ConfigError(f"{name}: field 'no_rope_layers' mixes layers with and without RoPE; "
                          "their counts differ (count each kind with --rope-fraction)")
    window = _get(text, "sliding_window")
    if window is not None and text.get("use_sliding_window", True) is not False:
        if isinstance(window, bool) or not isinstance(window, int):
            raise ConfigError(f"{name}: field 'sliding_window'={window!r} must be an integer")
        if 0 < window < 2:
            raise ConfigError(f"{name}: field 'sliding_window'={window} leaves each token only "
                              "itself; that count is not derived")


def _bias(text: dict[str, Any], fam: Family, name: str) -> str:
    letters = set(fam.bias)
    for key, switched, default in fam.bias_flags:
        if _flag(text, name, key, default):
            letters |= set(switched)
    return "".join(c for c in "qkvo" if c in letters)


def _qk_norm(text: dict[str, Any], fam: Family, name: str) -> str:
    for key in ("qk_layernorm", "use_qk_norm"):
        if key in fam.reads:
            return "layernorm" if _flag(text, name, key, fam.qk_norm == "layernorm") else "none"
    return fam.qk_norm


def _kv_heads(text: dict[str, Any], fam: Family, family: str, n_heads: int, name: str) -> int:
    if family == "falcon":
        if _flag(text, name, "new_decoder_architecture", False):
            return _get(text, "num_kv_heads", default=n_heads)
        return 1 if _flag(text, name, "multi_query", True) else n_heads
    if family == "gpt_bigcode":
        return 1 if _flag(text, name, "multi_query", True) else n_heads
    n_kv = _get(text, "num_key_value_heads")
    if n_kv is None:
        n_kv = fam.kv_default if fam.kv_default is not None else n_heads
    return _integer(name, "num_key_value_heads", n_kv)


def attention_fields_from_hf(data: Any, name: str = "config", family: str | None = None) -> dict[str, Any]:
    """AttentionConfig keyword arguments for one attention layer described by ``data``.

    ``family`` names the family of a config whose model_type the reader does not know.  A
    multi-head latent attention config (DeepSeek) is refused here: :func:`latent_fields_from_hf`
    reads it (``config_from_hf`` picks the right one).
    """
    text, fam_name, fam = family_of(data, name, family)
    if fam.qk_norm == "latent":
        raise ConfigError(f"{name}: family {fam_name!r} is multi-head latent attention, not an "
                          "AttentionConfig layer (read it with config_from_hf)")
    d_model = _get(text, "hidden_size", "n_embd", "d_model", "dim")
    if d_model is None:
        raise ConfigError(f"{name}: field 'hidden_size' is required")
    d_model = _integer(name, "hidden_size", d_model)
    n_heads = _get(text, "num_attention_heads", "n_head", "num_heads", "n_heads")
    if n_heads is None:
        raise ConfigError(f"{name}: field 'num_attention_heads' is required")
    n_heads = _integer(name, "num_attention_heads", n_heads)
    qk_norm = _qk_norm(text, fam, name)
    if qk_norm == "layernorm" and fam_name in LAYERNORM_SHARED:
        qk_norm = "layernorm_shared"
    _refusals(text, fam, fam_name, name)
    _check_unread(text, fam, name)
    n_kv = _kv_heads(text, fam, fam_name, n_heads, name)

    head_dim = _get(text, "head_dim", "d_kv")
    if head_dim is None:
        head_dim = fam.head_dim_default
    if head_dim is None and n_heads and d_model % n_heads == 0:
        head_dim = d_model // n_heads
    head_dim = None if head_dim is None else _integer(name, "head_dim", head_dim)

    rope_fraction, thetas = 0.0, [10000.0]
    if fam.positions == "rope":
        rope_fraction, thetas = _rope(text, fam, name)
        if rope_fraction != 1.0 and not fam.partial:
            raise ConfigError(f"{name}: partial_rotary_factor={rope_fraction:g}: the attention code of "
                              f"family {fam_name!r} rotates every dimension of each head (only "
                              "glm, glm4, gpt_neox, gptj, persimmon, phi, phi3, stablelm rotate part)")
        if fam_name == "gptj":
            rdim = text.get("rotary_dim", 64)          # GPTJConfig's default; null: all dims
            rope_fraction = 1.0 if rdim is None or head_dim is None else \
                _integer(name, "rotary_dim", rdim) / head_dim
    causal = fam.causal
    if text.get("use_bidirectional_attention") and "use_bidirectional_attention" in fam.reads:
        causal = False
    if "is_decoder" in fam.reads:
        causal = _flag(text, name, "is_decoder", False)
    bias = _bias(text, fam, name)
    softcap = None                      # an explicit null switches the family's cap off
    if "attn_logit_softcapping" in fam.reads:
        softcap = text["attn_logit_softcapping"] if "attn_logit_softcapping" in text else fam.softcap
    if softcap is not None:
        softcap = _number(text, name, "attn_logit_softcapping", softcap)
    out = dict(d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim,
               rope_fraction=rope_fraction, rope_base=thetas[0], bias=bias, causal=causal,
               qk_norm=qk_norm, softcap=softcap)
    if len(set(thetas)) > 1:
        _same_count_for_bases(out, thetas, name)
    return out


def _same_count_for_bases(fields_: dict[str, Any], thetas: list[float], name: str) -> None:
    """Layer types with different RoPE bases: refuse unless every base gives the same count."""
    counts = {count(AttentionConfig(**{**fields_, "rope_base": t})).unidentified for t in thetas}
    if len(counts) > 1:
        raise ConfigError(f"{name}: layer types with RoPE bases {thetas} have different counts; "
                          "count one layer type at a time with --rope-base")


def is_latent(data: Any, name: str = "config", family: str | None = None) -> bool:
    """Whether ``data`` describes multi-head latent attention (a DeepSeek family)."""
    return family_of(data, name, family)[2].qk_norm == "latent"


def latent_fields_from_hf(data: Any, name: str = "config", family: str | None = None) -> dict[str, Any]:
    """LatentAttentionConfig keyword arguments of a DeepSeek V2 / V3 config (either layout).

    Read: hidden_size, num_attention_heads, kv_lora_rank, q_lora_rank (null: no query latent),
    qk_nope_head_dim, qk_rope_head_dim, v_head_dim (absent: DeepseekV3Config's defaults),
    attention_bias, the RoPE base; qk_head_dim and head_dim (the rotary width) must agree with
    them; num_key_value_heads is not used by the code (every head gets its keys from the latent).
    """
    text, fam_name, fam = family_of(data, name, family)
    if fam.qk_norm != "latent":
        raise ConfigError(f"{name}: family {fam_name!r} is not multi-head latent attention")
    _refusals(text, fam, fam_name, name)
    _check_unread(text, fam, name)
    sizes = {}
    for key in ("hidden_size", "num_attention_heads"):
        if _get(text, key) is None:
            raise ConfigError(f"{name}: field {key!r} is required")
        sizes[key] = _integer(name, key, text[key])
    for key, default in LATENT_DEFAULTS.items():
        value = text[key] if key in text else default
        sizes[key] = None if value is None and key == "q_lora_rank" else _integer(name, key, value)
    n, p = sizes["qk_nope_head_dim"], sizes["qk_rope_head_dim"]
    for key, want in (("qk_head_dim", n + p), ("head_dim", p)):
        if text.get(key) is not None and _integer(name, key, text[key]) != want:
            raise ConfigError(f"{name}: field {key!r}={text[key]!r} must be {want} (qk_nope_head_dim "
                              f"{n} + qk_rope_head_dim {p}; head_dim is the rotary width)"
                              if key == "qk_head_dim" else
                              f"{name}: field 'head_dim'={text[key]!r} must equal qk_rope_head_dim={p} "
                              "(the rotary embedding's width in this family)")
    fraction, thetas = _rope(text, fam, name)
    if fraction != 1.0:
        raise ConfigError(f"{name}: partial_rotary_factor={fraction:g}: family {fam_name!r} rotates "
                          "all qk_rope_head_dim dims of its RoPE key")
    if len(set(thetas)) > 1:
        raise ConfigError(f"{name}: layer types with RoPE bases {thetas}: count one at a time")
    return dict(d_model=sizes["hidden_size"], n_heads=sizes["num_attention_heads"],
                kv_latent=sizes["kv_lora_rank"], q_latent=sizes["q_lora_rank"], nope_dim=n,
                rope_dim=p, value_dim=sizes["v_head_dim"], rope_base=thetas[0],
                bias=_flag(text, name, "attention_bias", False), causal=True)


def family_table() -> list[dict[str, str]]:
    """One row per family: positions, biases, QK-norm, causal, defaults and fields read (for the docs)."""
    rows = []
    for key, f in sorted(FAMILIES.items()):
        flags = ", ".join(f"{k} -> {letters}" for k, letters, _ in f.bias_flags)
        rows.append({"model_type": key, "positions": f.positions if f.positions != "rope" else
                     f"rope (fraction {f.rope_fraction:g}, base {f.rope_theta:g})",
                     "biases": (f.bias or "none") + (f"; {flags}" if flags else ""),
                     "qk_norm": f.qk_norm, "causal": "yes" if f.causal else "no",
                     "kv_heads default": "heads" if f.kv_default is None else str(f.kv_default),
                     "also reads": ", ".join(f.reads), "note": f.note})
    return rows


# -- reading configs (moved here from AttentionConfig: hf imports config, never the reverse) -----

HF_MARKERS = ("hidden_size", "n_embd", "model_type", "text_config")


def is_hf(data: Any, family: str | None = None) -> bool:
    """Whether parsed JSON is a Hugging Face config (rather than AttentionConfig fields)."""
    return isinstance(data, dict) and (family is not None or any(k in data for k in HF_MARKERS))


def _load(source: Any) -> tuple[Any, str]:
    if isinstance(source, (str, os.PathLike)):
        return read_json(source)
    return source, "config"          # parsed JSON (anything but an object is refused by name)


def config_from_hf(source: Any, family: str | None = None) -> AttentionConfig | LatentAttentionConfig:
    """Read a Hugging Face config.json (a path or an already-parsed dict): an AttentionConfig,
    or a LatentAttentionConfig for multi-head latent attention (DeepSeek).

    ``family`` names the family of a config whose model_type the reader does not know.
    """
    return _layer(*_load(source), family)


def _layer(data: Any, name: str, family: str | None) -> AttentionConfig | LatentAttentionConfig:
    if is_latent(data, name, family):
        return LatentAttentionConfig(**latent_fields_from_hf(data, name, family))
    return AttentionConfig(**attention_fields_from_hf(data, name, family))


def config_from_file(path: Any, family: str | None = None) -> AttentionConfig | LatentAttentionConfig:
    """A JSON file holding either AttentionConfig fields or a Hugging Face config."""
    data, name = read_json(path)
    if is_hf(data, family):
        return _layer(data, name, family)
    return AttentionConfig.from_dict(data, name)
