"""Translate a Hugging Face style ``config.json`` into AttentionConfig fields.

Only what the attention layer's identification depends on is read; anything the layer model
cannot represent (ALiBi, latent K/V, unknown position schemes) is refused, never guessed.
"""
from __future__ import annotations

from typing import Any

from .config import ConfigError

# model families whose attention uses learned (or sinusoidal) absolute positions, no RoPE
LEARNED_POSITIONS = {"gpt2", "bert", "roberta", "distilbert", "opt", "gpt_neo", "xlm-roberta",
                     "electra", "bart", "t5", "gpt_bigcode", "biogpt"}
# model families that rotate queries and keys (RoPE), in full unless a partial factor is set
ROTARY = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
          "gemma2", "gemma3", "gemma3_text", "olmo", "olmo2", "phi3", "phi", "falcon",
          "gpt_neox", "gptj", "stablelm", "starcoder2", "cohere", "internlm2", "smollm3",
          "granite", "deepseek_v2", "deepseek_v3", "exaone", "mpt_rope"}
# families whose heads RMS-normalise q and k, with gains shared by the heads
QK_NORM_GAIN = {"qwen3", "qwen3_moe", "gemma3", "gemma3_text"}
# families with a QK-norm AttentionConfig cannot represent exactly
QK_NORM_UNREPRESENTED = {"olmo2": "OLMo 2 normalises the whole projected q and k (all heads "
                                  "together), not each head"}
ENCODERS = {"bert", "roberta", "distilbert", "xlm-roberta", "electra"}
# families whose q/k/v/o projections carry biases by default (when the config has no flag)
DEFAULT_BIAS = {"gpt2": "qkvo", "bert": "qkvo", "roberta": "qkvo", "distilbert": "qkvo",
                "xlm-roberta": "qkvo", "electra": "qkvo", "opt": "qkvo", "gpt_neo": "qkvo",
                "gpt_neox": "qkvo", "phi": "qkvo", "gpt_bigcode": "qkvo", "starcoder2": "qkvo",
                "qwen2": "qkv", "qwen2_moe": "qkv", "gptj": "", "falcon": ""}


def _number(data: dict[str, Any], name: str, keys: tuple[str, ...], default: float) -> float:
    value = _get(data, *keys, default=default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        key = next((k for k in keys if k in data), keys[0])
        raise ConfigError(f"{name}: field {key!r}={value!r} must be a number")
    return float(value)


def _flag(data: dict[str, Any], name: str, key: str) -> bool:
    if not isinstance(data[key], bool):
        raise ConfigError(f"{name}: field {key!r}={data[key]!r} must be true or false")
    return data[key]


def _get(data: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in data and data[k] is not None:
            return data[k]
    return default


LATENT_NOTE = ("multi-head latent attention with a decoupled RoPE key of qk_rope_head_dim dims "
               "shared by all heads and a learned gain on the latent norm; counted as latent K/V "
               "(C = kv_lora_rank, head_dim = qk_nope_head_dim) without the RoPE key and without "
               "the latent gain")


def approximation_note(data: Any) -> str | None:
    """Why ``attention_fields_from_hf(data, approximate=True)`` is not exact (None if it is)."""
    if not isinstance(data, dict):
        return None
    if "text_config" in data and "hidden_size" not in data:
        data = data["text_config"]
    model_type = str(data.get("model_type", "")).lower()
    if model_type in QK_NORM_UNREPRESENTED:
        return QK_NORM_UNREPRESENTED[model_type] + "; represented by per-head QK-norm with shared gains"
    if data.get("kv_lora_rank") is not None and data.get("q_lora_rank") is None:
        return LATENT_NOTE
    return None


def attention_fields_from_hf(data: Any, name: str = "config", approximate: bool = False) -> dict[str, Any]:
    """AttentionConfig keyword arguments for one attention layer described by ``data``.

    ``approximate=True`` maps two architectures the layer model cannot represent exactly to their
    nearest representable layer (``approximation_note`` says how); by default they are refused.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: a Hugging Face config must be a JSON object")
    if "text_config" in data and "hidden_size" not in data:
        data = data["text_config"]
        if not isinstance(data, dict):
            raise ConfigError(f"{name}: field 'text_config' must be a JSON object")
    model_type = str(data.get("model_type", "")).lower()
    if approximate and approximation_note(data) is not None:
        return _approximate_fields(data, model_type, name)
    d_model = _get(data, "hidden_size", "n_embd", "d_model")
    if d_model is None:
        raise ConfigError(f"{name}: field 'hidden_size' is required")
    n_heads = _get(data, "num_attention_heads", "n_head", "num_heads")
    if n_heads is None:
        raise ConfigError(f"{name}: field 'num_attention_heads' is required")
    if data.get("alibi") or str(data.get("position_embedding_type", "")).lower() == "alibi":
        raise ConfigError(f"{name}: ALiBi position biases are not represented by AttentionConfig")
    if model_type in QK_NORM_UNREPRESENTED:
        raise ConfigError(f"{name}: {QK_NORM_UNREPRESENTED[model_type]}; this QK-norm is not "
                          "represented by AttentionConfig (the census counts it approximately)")
    if _get(data, "kv_lora_rank", "q_lora_rank") is not None:
        raise ConfigError(f"{name}: latent K/V attention (kv_lora_rank) is not represented "
                          "by AttentionConfig")

    n_kv = _get(data, "num_key_value_heads", "num_kv_heads", "n_head_kv")
    if model_type == "falcon" and data.get("multi_query") and not data.get("new_decoder_architecture"):
        n_kv = 1          # Falcon-7B: later copies carry num_kv_heads = 71, which it ignores
    elif n_kv is None and data.get("multi_query"):
        n_kv = 1
    head_dim = _get(data, "head_dim")

    pos_type = str(data.get("position_embedding_type", "")).lower()
    rope_keys = ("rope_theta", "rotary_emb_base", "rotary_pct", "partial_rotary_factor", "rope_scaling")
    if pos_type in ("absolute", "learned", "sinusoidal") or model_type in LEARNED_POSITIONS:
        rotary = False
    elif pos_type in ("rotary", "rope") or model_type in ROTARY or any(k in data for k in rope_keys):
        rotary = True
    else:
        raise ConfigError(f"{name}: cannot tell whether the model uses rotary or learned positions "
                          "(set 'model_type', 'rope_theta' or 'position_embedding_type')")
    rope_fraction = (_number(data, name, ("partial_rotary_factor", "rotary_pct"), 1.0)
                     if rotary else 0.0)
    rope_base = _number(data, name, ("rope_theta", "rotary_emb_base"), 10000.0)

    if "attention_bias" in data:
        bias = "qkvo" if _flag(data, name, "attention_bias") else ""
        if "qkv_bias" in data and _flag(data, name, "qkv_bias"):
            bias = "qkv" + ("o" if data["attention_bias"] else "")
    elif "qkv_bias" in data:
        bias = "qkv" if _flag(data, name, "qkv_bias") else ""
    elif "bias" in data and isinstance(data["bias"], bool):
        bias = "qkvo" if data["bias"] else ""
    elif "use_bias" in data:
        bias = "qkvo" if _flag(data, name, "use_bias") else ""
    else:
        bias = DEFAULT_BIAS.get(model_type, "")
    causal = model_type not in ENCODERS
    return dict(d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim,
                rope_fraction=rope_fraction, rope_base=rope_base, bias=bias, causal=causal,
                qk_norm="gain" if model_type in QK_NORM_GAIN else "none")


def _approximate_fields(data: dict[str, Any], model_type: str, name: str) -> dict[str, Any]:
    if model_type in QK_NORM_UNREPRESENTED:
        fields_ = attention_fields_from_hf({**data, "model_type": "llama"}, name)
        return fields_ | {"qk_norm": "gain"}
    k = int(data.get("qk_nope_head_dim") or data["hidden_size"] // data["num_attention_heads"])
    return dict(d_model=data["hidden_size"], n_heads=data["num_attention_heads"], head_dim=k,
                value_dim=int(data.get("v_head_dim") or k), kv_latent=int(data["kv_lora_rank"]),
                latent_norm=True, causal=True)
