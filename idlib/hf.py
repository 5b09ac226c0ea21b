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

import json
import math
import os
import re
from pathlib import Path
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from .config import AttentionConfig, ConfigError, LatentAttentionConfig, read_json, show
from .counting import count
from .model import LayerType, Model


POSITIONS = ("rope", "learned", "relative", "alibi", "none")   # none: no positions in attention


@dataclass(frozen=True)
class Family:
    """What the attention code of one ``model_type`` does with its config (transformers 5.23)."""

    positions: str = "rope"                 # one of POSITIONS ("relative": T5's bucket bias)
    bias: str = ""                          # biases that are always there
    bias_flags: tuple[tuple[str, str, bool], ...] = ()   # (field, letters it switches, default)
    kv_default: int | None = None           # num_key_value_heads when absent (None: = heads)
    head_dim_default: int | None = None     # head_dim when absent (None: hidden / heads)
    rope_fraction: float = 1.0              # partial_rotary_factor when absent
    rope_theta: float = 10000.0             # rope_theta when absent
    qk_norm: str = "none"                   # an AttentionConfig qk_norm
    causal: bool = True
    softcap: float | None = None            # attn_logit_softcapping when absent
    reads: tuple[str, ...] = ()             # family-specific fields it reads (beyond the common ones)
    partial: bool = False                   # its code rotates only part of each head when asked
    note: str = ""
    qk_norm_flag: tuple[str, str, bool] | None = None   # (field, the QK-norm it switches on, default)
    latent: bool = False                    # multi-head latent attention (LatentAttentionConfig)
    alibi: tuple[str, bool] | None = None   # (field switching ALiBi on, its default); positions
                                            # "alibi" means always
    sinks: bool = False                     # attention sinks (a learned logit per head)
    output_gate: bool = False               # a sigmoid gate on each head's output
    kv_heads: Callable[[dict[str, Any], int, str], Any] | None = None   # its own kv-head reading
    layers: Callable[[dict[str, Any], int, str], list[dict[str, Any]]] | None = None
    # per layer: AttentionConfig field overrides, or {"skip": reason} for a layer that is not
    # softmax attention (``layer_kinds``); None: every layer the same
    nested: tuple[str, ...] = ()            # sub-objects read as "outer.field" (MPT's attn_config)
    rotary_dim: tuple[str, int] | None = None   # (field giving the rotated dims per head, default;
                                                # null: all of them), instead of a fraction
    ignores: tuple[str, ...] = ()           # fields its config has and its transformers code ignores
    n_layers_default: int | None = None     # num_hidden_layers when absent (families whose layers differ)
    reads_kv: bool = True                   # its code reads num_key_value_heads (else: one per head)
    reads_head_dim: bool = True             # its code reads head_dim (else: hidden_size / heads)
    kv_null: str = "refuse"                 # an explicit null num_key_value_heads: "heads", or
                                            # refused (transformers rejects it or fails on it)
    head_dim_null: str = "refuse"           # an explicit null head_dim: "derived" (hidden / heads)
                                            # or refused
    refused: tuple[str, ...] = ()           # fields its config class refuses to load (Falcon's
                                            # head_dim is a property computed from the others)
    fraction_key: str = "partial_rotary_factor"   # the rotary share's name in the older layout
                                            # (GPT-NeoX: rotary_pct; the other name is ignored)
    rotary_head_dim: bool = False           # its rotary embedding is sized by head_dim while its
                                            # heads are hidden / heads wide: the two must agree
    heads_span_width: bool = False          # its code sizes a projection or norm by hidden_size
                                            # where heads x head_dim belongs: the two must agree
    heads_multiple: int = 1                 # its code needs a multiple of this many heads
    share_breaks: bool = False              # a rotary share below 1 breaks its code (GPT-OSS's
                                            # rotary halves the whole head): refused
    harmless: tuple[str, ...] = ()          # a model type's own fields that leave the layer
                                            # unchanged (the reasons: idlib/data/model_types.json)
    refuse_values: tuple[tuple[str, Any, str], ...] = ()   # (field, a value its code runs
                                            # differently with, what that code does): refused
    fills: tuple[tuple[str, Any], ...] = ()  # (field, its config class's default), filled in
                                            # where the file leaves the field out
    width_keys: tuple[str, ...] = ()        # its own names of hidden_size, of the head count and
    heads_keys: tuple[str, ...] = ()        # of the number of layers (beyond WIDTH_KEYS, HEADS_KEYS
    layers_keys: tuple[str, ...] = ()       # and num_hidden_layers, n_layer, num_layers, n_layers)

    def __post_init__(self) -> None:
        if self.positions not in POSITIONS:
            raise ValueError(f"Family: positions={self.positions!r} must be one of {POSITIONS}")

    @property
    def rotary(self) -> bool:
        """RoPE inside attention (the rope row's fields are read; unless ALiBi is switched on)."""
        return self.positions == "rope"

    @property
    def always_alibi(self) -> bool:
        """ALiBi on every layer, whatever the file says (BLOOM, MPT)."""
        return self.positions == "alibi"

    @property
    def reads_alibi(self) -> bool:
        """ALiBi always, or switched by a field of the file (Falcon's ``alibi``)."""
        return self.always_alibi or self.alibi is not None


# -- family-specific readers (called with the text config, the head count / layer count, name) --

def _falcon_kv(text: dict[str, Any], n_heads: int, name: str) -> Any:
    """FalconAttention: num_kv_heads (alias n_head_kv) with the new decoder architecture, else
    one head when multi_query (the default), else one per query head."""
    if _flag(text, name, "new_decoder_architecture", False):
        return _get(text, "num_kv_heads", "n_head_kv", default=n_heads)
    return 1 if _flag(text, name, "multi_query", True) else n_heads


def _multi_query_kv(text: dict[str, Any], n_heads: int, name: str) -> Any:
    """GPTBigCodeAttention: one key/value head when multi_query (the default)."""
    return 1 if _flag(text, name, "multi_query", True) else n_heads


def _layer_list(text: dict[str, Any], key: str, n_layers: int, name: str) -> list[Any]:
    value = text.get(key)
    if not isinstance(value, list) or len(value) != n_layers:
        raise ConfigError(f"{name}: field {key!r} must be a list of {n_layers} entries (one per "
                          f"layer, num_hidden_layers={n_layers}); got {show(value)}")
    return value


def _layer_types(text: dict[str, Any], n_layers: int, name: str, allowed: tuple[str, ...]) -> list[str]:
    """``layer_types`` (one per layer) with every entry one of ``allowed``; absent: all the first."""
    if text.get("layer_types") is None:
        return [allowed[0]] * n_layers
    types = _layer_list(text, "layer_types", n_layers, name)
    bad = sorted({str(t) for t in types} - set(allowed))
    if bad:
        raise ConfigError(f"{name}: field 'layer_types' holds {bad[0]!r}: this family's layers are "
                          f"{', '.join(allowed)} (another kind of layer is not read)")
    return types


WINDOW_TYPES = ("full_attention", "sliding_attention")


def _window_layers(text: dict[str, Any], n_layers: int, name: str) -> list[dict[str, Any]]:
    """Sliding or full attention per layer: the same attention function (see sliding_window)."""
    _layer_types(text, n_layers, name, WINDOW_TYPES)
    return [{}] * n_layers


def _no_rope_layers(text: dict[str, Any], n_layers: int, name: str) -> list[dict[str, Any]]:
    """SmolLM3 / Llama 4: ``no_rope_layers`` (1 = RoPE, 0 = none) per layer; absent, every
    ``no_rope_layer_interval``-th layer (default 4) has none (their config classes' default)."""
    if text.get("no_rope_layers") is None:
        interval = _integer(name, "no_rope_layer_interval", text.get("no_rope_layer_interval") or 4)
        flags = [int((i + 1) % interval != 0) for i in range(n_layers)]
    else:
        flags = _layer_list(text, "no_rope_layers", n_layers, name)
        if any(f not in (0, 1) or isinstance(f, float) for f in flags):
            raise ConfigError(f"{name}: field 'no_rope_layers' must hold 0 or 1 per layer")
    return [{} if f else {"rope_fraction": 0.0} for f in flags]


def _smollm3_layers(text: dict[str, Any], n_layers: int, name: str) -> list[dict[str, Any]]:
    _window_layers(text, n_layers, name)
    return _no_rope_layers(text, n_layers, name)


def _llama4_layers(text: dict[str, Any], n_layers: int, name: str) -> list[dict[str, Any]]:
    """Llama 4: NoPE layers per ``no_rope_layers``; the weightless L2 QK-norm (``use_qk_norm``,
    default true) only on the RoPE layers; chunked or full attention (a window, see
    attention_chunk_size)."""
    _layer_types(text, n_layers, name, ("chunked_attention", "full_attention"))
    norm = "plain" if _flag(text, name, "use_qk_norm", True) else "none"
    return [{"qk_norm": norm} if not o else {**o, "qk_norm": "none"}
            for o in _no_rope_layers(text, n_layers, name)]


def _pattern_types(text: dict[str, Any], n_layers: int, name: str) -> list[str]:
    """``layer_types``, or (absent) the config class's default from ``sliding_window_pattern``: an
    integer p (default 4) makes every p-th layer full attention, a string such as "LLLG" gives the
    pattern letter by letter (L sliding, G global), repeated."""
    if text.get("layer_types") is not None:
        return _layer_types(text, n_layers, name, ("sliding_attention", "full_attention"))
    pattern = text.get("sliding_window_pattern", 4)
    if isinstance(pattern, str) and pattern and set(pattern) <= {"L", "G"}:
        return ["sliding_attention" if pattern[i % len(pattern)] == "L" else "full_attention"
                for i in range(n_layers)]
    p = _integer(name, "sliding_window_pattern", pattern)
    if p < 1:
        raise ConfigError(f"{name}: field 'sliding_window_pattern'={pattern!r} must be at least 1 "
                          "(or a string of L and G)")
    return ["sliding_attention" if (i + 1) % p else "full_attention" for i in range(n_layers)]


def _cohere2_layers(text: dict[str, Any], n_layers: int, name: str) -> list[dict[str, Any]]:
    """Cohere2Attention rotates only on sliding layers, and only when sliding_window is set."""
    types = _pattern_types(text, n_layers, name)
    window = _window_set(text)
    return [{} if t == "sliding_attention" and window else {"rope_fraction": 0.0} for t in types]


def _window_set(text: dict[str, Any]) -> bool:
    """Whether the layers have a sliding window: an absent ``sliding_window`` takes the config
    class's default (4096 for Cohere2 and EXAONE 4), an explicit null means none."""
    return "sliding_window" not in text or text["sliding_window"] is not None


def _exaone4_layers(text: dict[str, Any], n_layers: int, name: str) -> list[dict[str, Any]]:
    """Exaone4Attention rotates when sliding_window is unset, else only on sliding layers."""
    if not _window_set(text):
        return [{}] * n_layers
    types = _pattern_types(text, n_layers, name)
    return [{} if t == "sliding_attention" else {"rope_fraction": 0.0} for t in types]


def _qwen3_next_layers(text: dict[str, Any], n_layers: int, name: str) -> list[dict[str, Any]]:
    """Qwen3-Next: full (gated softmax) attention every full_attention_interval-th layer (default
    4); the others are linear attention (Gated DeltaNet), not softmax attention."""
    if text.get("layer_types") is None:
        interval = _integer(name, "full_attention_interval", text.get("full_attention_interval") or 4)
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                 for i in range(n_layers)]
    else:
        types = _layer_types(text, n_layers, name, ("linear_attention", "full_attention"))
    return [{} if t == "full_attention" else {"skip": LINEAR_ATTENTION} for t in types]


LINEAR_ATTENTION = "linear attention (Gated DeltaNet), not softmax attention: not counted"


# -- per-layer structure named by a model type's row (idlib/data/model_types.json: "layers") --------

def _required(text: dict[str, Any], key: str, name: str) -> Any:
    if text.get(key) is None:
        raise ConfigError(f"{name}: field {key!r} is required: it says which layers are softmax "
                          "attention and how (never guessed)")
    return text[key]


def _kinds_layers(field: str, counted: dict[str, dict[str, Any]], skip: dict[str, str]) -> Callable:
    """Layers by the kind a per-layer list names: the ``counted`` kinds are softmax attention (with
    these AttentionConfig overrides), the ``skip`` ones are not (the reason); another is refused."""
    def layers(text: dict[str, Any], n_layers: int, name: str) -> list[dict[str, Any]]:
        _required(text, field, name)
        out = []
        for kind in _layer_list(text, field, n_layers, name):
            if kind in counted:
                out.append(dict(counted[kind]))
            elif kind in skip:
                out.append({"skip": skip[kind]})
            else:
                raise ConfigError(f"{name}: field {field!r} holds {kind!r}: this model type's layers "
                                  f"are {', '.join(list(counted) + list(skip))} (another kind is not read)")
        return out
    return layers


def _pattern_layers(field: str, counted: dict[str, dict[str, Any]], skip: dict[str, str]) -> Callable:
    """Layers by the letters of a string, one per layer (Nemotron-H's hybrid_override_pattern)."""
    def layers(text: dict[str, Any], n_layers: int, name: str) -> list[dict[str, Any]]:
        pattern = _required(text, field, name)
        if not isinstance(pattern, str) or len(pattern) != n_layers:
            raise ConfigError(f"{name}: field {field!r} must be a string of {n_layers} letters "
                              f"(one per layer); got {show(pattern)}")
        return _kinds_layers(field, counted, skip)({field: list(pattern)}, n_layers, name)
    return layers


def _period_layers(period: str, offset: str, skip: str) -> Callable:
    """Softmax attention on the layers i with i % period == offset (Jamba); the others not."""
    def layers(text: dict[str, Any], n_layers: int, name: str) -> list[dict[str, Any]]:
        p = _size(name, period, _required(text, period, name))
        o = _integer(name, offset, _required(text, offset, name))
        if not 0 <= o < p:
            raise ConfigError(f"{name}: field {offset!r}={o} must be at least 0 and below {period}={p}")
        return [{} if i % p == o else {"skip": skip} for i in range(n_layers)]
    return layers


def _index_layers(field: str, listed: dict[str, Any] | str, others: dict[str, Any] | str) -> Callable:
    """Layers by whether a list of indices names them: each side is AttentionConfig overrides (a
    dict) or the reason it is not counted (a string)."""
    def kind(v: dict[str, Any] | str) -> dict[str, Any]:
        return {"skip": v} if isinstance(v, str) else dict(v)

    def layers(text: dict[str, Any], n_layers: int, name: str) -> list[dict[str, Any]]:
        indices = _required(text, field, name)
        if not isinstance(indices, list) or any(isinstance(i, bool) or not isinstance(i, int)
                                                or not 0 <= i < n_layers for i in indices):
            raise ConfigError(f"{name}: field {field!r} must be a list of layer indices below "
                              f"num_hidden_layers={n_layers}; got {show(indices)}")
        return [kind(listed) if i in indices else kind(others) for i in range(n_layers)]
    return layers


LAYER_READERS: dict[str, Callable[..., Callable]] = {
    "window": lambda: _window_layers, "rope_on_sliding": lambda: _cohere2_layers,
    "kinds": _kinds_layers, "pattern": _pattern_layers, "period": _period_layers,
    "indices": _index_layers}


_LLAMA_BIAS = (("attention_bias", "qkvo", False),)
LATENT_READS = ("attention_bias", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                "v_head_dim", "qk_head_dim")
FAMILIES: dict[str, Family] = {
    "llama": Family(head_dim_null="derived", kv_null="heads", bias_flags=_LLAMA_BIAS),
    "mistral": Family(head_dim_null="derived", kv_default=8),
    "mixtral": Family(head_dim_null="derived", kv_default=8, rope_theta=1e6),
    "granite": Family(kv_null="heads", bias_flags=_LLAMA_BIAS, reads=("attention_multiplier",)),
    "smollm3": Family(kv_null="heads", bias_flags=_LLAMA_BIAS, kv_default=4, rope_theta=2e6, layers=_smollm3_layers,
                      n_layers_default=36,
                      reads=("no_rope_layers", "no_rope_layer_interval", "layer_types"),
                      note="no RoPE on the layers no_rope_layers marks 0 (every 4th by default)"),
    "qwen2": Family(kv_null="heads", bias="qkv", kv_default=32, reads=("qkv_bias", "layer_types"), layers=_window_layers,
                    note="q, k, v always biased, o never (a qkv_bias field is ignored by the code)"),
    "qwen2_vl_text": Family(kv_null="heads", reads_head_dim=False, bias="qkv", kv_default=8, rope_theta=1e6, layers=_window_layers,
                            reads=("mrope_section", "layer_types"),
                            note="q, k, v always biased; M-RoPE equals RoPE on text tokens"),
    "qwen2_5_vl_text": Family(kv_null="heads", reads_head_dim=False, bias="qkv", kv_default=8, rope_theta=1e6, layers=_window_layers,
                              reads=("mrope_section", "layer_types"), note="as Qwen2-VL"),
    "qwen2_moe": Family(bias_flags=(("qkv_bias", "qkv", True),), kv_default=16, layers=_window_layers,
                        reads=("layer_types",)),
    "qwen3": Family(kv_null="heads", bias_flags=_LLAMA_BIAS, kv_default=32, head_dim_default=128, qk_norm="gain",
                    layers=_window_layers, reads=("layer_types",)),
    "qwen3_moe": Family(bias_flags=_LLAMA_BIAS, kv_default=4, qk_norm="gain"),
    "gemma": Family(bias_flags=_LLAMA_BIAS, kv_default=16, head_dim_default=256,
                    reads=("use_bidirectional_attention",)),
    "gemma2": Family(bias_flags=_LLAMA_BIAS, kv_default=4, head_dim_default=256, softcap=50.0,
                     layers=_window_layers,
                     reads=("attn_logit_softcapping", "query_pre_attn_scalar",
                            "use_bidirectional_attention", "layer_types")),
    "gemma3_text": Family(bias_flags=_LLAMA_BIAS, kv_default=4, head_dim_default=256, qk_norm="gain",
                          layers=_window_layers,
                          reads=("attn_logit_softcapping", "query_pre_attn_scalar",
                                 "use_bidirectional_attention", "rope_local_base_freq", "layer_types")),
    "phi": Family(kv_null="heads", bias="qkvo", rope_fraction=0.5, partial=True,
                  qk_norm_flag=("qk_layernorm", "layernorm_shared", False)),
    "phi3": Family(kv_null="heads", partial=True),
    "persimmon": Family(reads_kv=False, reads_head_dim=False, rotary_head_dim=True, bias="qkvo", rope_fraction=0.5, partial=True,
                        qk_norm_flag=("qk_layernorm", "layernorm_shared", True)),
    "stablelm": Family(reads_head_dim=False, rotary_head_dim=True, bias_flags=(("use_qkv_bias", "qkv", False),), kv_default=32,
                       rope_fraction=0.25, partial=True, qk_norm_flag=("qk_layernorm", "layernorm", False)),
    "gpt_neox": Family(reads_kv=False, reads_head_dim=False, rotary_head_dim=True,
                       fraction_key="rotary_pct", bias_flags=(("attention_bias", "qkvo", True),), rope_fraction=0.25,
                       reads=("rotary_emb_base",), partial=True),
    "gptj": Family(reads_kv=False, reads_head_dim=False, reads=("rotary_dim",), partial=True, rotary_dim=("rotary_dim", 64),
                   note="rotary_dim rotated dims per head (interleaved pairs)"),
    "codegen": Family(reads_kv=False, reads_head_dim=False, heads_multiple=4, reads=("rotary_dim",), partial=True, rotary_dim=("rotary_dim", 64),
                      note="as GPT-J; the fused projection needs heads in multiples of 4"),
    "falcon": Family(reads_head_dim=False, refused=("head_dim",), bias_flags=(("bias", "qkvo", False),), kv_heads=_falcon_kv, alibi=("alibi", False),
                     reads=("multi_query", "new_decoder_architecture", "num_kv_heads", "n_head_kv"),
                     note="alibi: ALiBi instead of RoPE"),
    "olmo": Family(kv_null="heads", bias_flags=_LLAMA_BIAS, reads=("clip_qkv",)),
    "olmo2": Family(kv_null="heads", bias_flags=_LLAMA_BIAS, qk_norm="whole"),
    "olmo3": Family(kv_null="heads", bias_flags=_LLAMA_BIAS, qk_norm="whole", rope_theta=500000.0, layers=_window_layers,
                    reads=("layer_types",)),
    "olmoe": Family(kv_null="heads", heads_span_width=True, bias_flags=_LLAMA_BIAS, qk_norm="whole", reads=("clip_qkv",)),
    "cohere": Family(kv_null="heads", bias_flags=_LLAMA_BIAS, rope_theta=500000.0, reads=("logit_scale",),
                     qk_norm_flag=("use_qk_norm", "layernorm", False), note="interleaved RoPE pairs"),
    "cohere2": Family(kv_null="heads", bias_flags=_LLAMA_BIAS, kv_default=64, head_dim_default=128, layers=_cohere2_layers,
                      n_layers_default=40, reads=("layer_types", "sliding_window_pattern", "logit_scale"),
                      note="interleaved RoPE pairs, only on sliding layers (full layers: no RoPE)"),
    "starcoder2": Family(head_dim_null="derived", bias_flags=(("use_bias", "qkvo", True),), kv_default=2),
    "glm": Family(bias_flags=(("attention_bias", "qkv", True),), kv_default=2, head_dim_default=128,
                  rope_fraction=0.5, partial=True, note="attention_bias switches q, k, v; o is never biased"),
    "glm4": Family(bias_flags=(("attention_bias", "qkv", True),), kv_default=2, head_dim_default=128,
                   rope_fraction=0.5, partial=True, note="as GLM"),
    "deepseek_v2": Family(latent=True, reads=LATENT_READS,
                          note="multi-head latent attention (idlib.config.LatentAttentionConfig)"),
    "deepseek_v3": Family(kv_default=128, latent=True, reads=LATENT_READS + ("rope_interleave",),
                          note="multi-head latent attention (idlib.config.LatentAttentionConfig)"),
    "gpt2": Family(positions="learned", bias="qkvo", reads_kv=False, reads_head_dim=False,
                   reads=("scale_attn_weights", "scale_attn_by_inverse_layer_idx",
                          "reorder_and_upcast_attn")),
    "gpt_neo": Family(positions="learned", bias="o", reads_kv=False, reads_head_dim=False, reads=("attention_types", "attention_layers"),
                      note="only the output projection is biased; local layers are windowed"),
    "gpt_bigcode": Family(positions="learned", bias="qkvo", kv_heads=_multi_query_kv, reads_head_dim=False,
                          reads=("multi_query",)),
    "opt": Family(positions="learned", bias_flags=(("enable_bias", "qkvo", True),), reads_kv=False,
                  reads_head_dim=False),
    "bert": Family(positions="learned", bias="qkvo", causal=False, reads_kv=False, reads_head_dim=False,
                   reads=("position_embedding_type", "is_decoder"), note="causal when is_decoder"),
    "roberta": Family(positions="learned", bias="qkvo", causal=False, reads=("position_embedding_type",),
                      reads_kv=False, reads_head_dim=False),
    "xlm-roberta": Family(positions="learned", bias="qkvo", causal=False, reads_kv=False, reads_head_dim=False,
                          reads=("position_embedding_type",)),
    "electra": Family(positions="learned", bias="qkvo", causal=False, reads=("position_embedding_type",),
                      reads_kv=False, reads_head_dim=False),
    "distilbert": Family(positions="learned", bias="qkvo", causal=False, reads_kv=False,
                         reads_head_dim=False),
    "t5": Family(positions="relative", causal=False, reads=("d_kv",), reads_kv=False,
                 note="encoder self-attention; the relative-position bucket bias is a separate "
                      "table added to the scores, not counted"),
    # -- the attention people run in 2026 (chapter 10) ------------------------------------------
    "bloom": Family(reads_kv=False, reads_head_dim=False, positions="alibi", bias="qkvo", reads=("n_embed", "slow_but_exact"),
                    note="ALiBi; fused query_key_value"),
    "mpt": Family(reads_kv=False, reads_head_dim=False, positions="alibi", nested=("attn_config",),
                  reads=("attn_config.clip_qkv", "attn_config.softmax_scale", "attn_config.attn_pdrop"),
                  ignores=("no_bias", "learned_pos_emb", "attn_config.alibi", "attn_config.alibi_bias_max",
                           "attn_config.qk_ln", "attn_config.attn_type", "attn_config.prefix_lm",
                           "attn_config.attn_impl", "attn_config.attn_uses_sequence_id"),
                  note="ALiBi always and no biases (transformers' MptAttention and MptModel ignore "
                       "no_bias, attn_config.alibi, qk_ln, prefix_lm)"),
    "gpt_oss": Family(share_breaks=True, bias_flags=(("attention_bias", "qkvo", True),), kv_default=8, head_dim_default=64,
                      rope_theta=150000.0, sinks=True, layers=_window_layers, reads=("layer_types",),
                      note="attention sinks: a learned logit per head in the softmax"),
    "qwen3_next": Family(bias_flags=_LLAMA_BIAS, kv_default=2, head_dim_default=256, rope_fraction=0.25,
                         partial=True, qk_norm="gain", output_gate=True, layers=_qwen3_next_layers,
                         n_layers_default=48,
                         reads=("layer_types", "full_attention_interval", "linear_conv_kernel_dim",
                                "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",
                                "linear_num_value_heads"),
                         note="gated attention on the full-attention layers; the linear-attention "
                              "layers are not softmax attention (not counted)"),
    "llama4_text": Family(bias_flags=_LLAMA_BIAS, kv_default=8, head_dim_default=128, rope_theta=500000.0,
                          layers=_llama4_layers, n_layers_default=48,
                          reads=("no_rope_layers", "no_rope_layer_interval", "use_qk_norm", "layer_types",
                                 "attn_temperature_tuning", "floor_scale", "attn_scale",
                                 "attention_chunk_size"),
                          note="NoPE every no_rope_layer_interval-th layer; weightless L2 QK-norm on "
                               "the RoPE layers; interleaved RoPE pairs"),
    "exaone4": Family(qk_norm="gain", kv_default=32, layers=_exaone4_layers, n_layers_default=32,
                      reads=("layer_types", "sliding_window_pattern"),
                      note="QK-norm with gains; with a sliding window, RoPE only on sliding layers"),
    "ministral": Family(kv_default=8, layers=_window_layers, reads=("layer_types",)),
    "granitemoe": Family(kv_null="heads", bias_flags=_LLAMA_BIAS, kv_default=32, reads=("attention_multiplier",)),
    "seed_oss": Family(head_dim_null="derived", kv_null="heads", bias_flags=(("attention_bias", "qkv", True), ("attention_out_bias", "o", False)),
                       head_dim_default=128, kv_default=8,
                       note="attention_bias switches q, k, v; attention_out_bias o"),
    "nemotron": Family(head_dim_null="derived", bias_flags=_LLAMA_BIAS, rope_fraction=0.5, partial=True, head_dim_default=None),
    "helium": Family(heads_span_width=True, bias_flags=(("attention_bias", "qkv", False),), head_dim_default=128, kv_default=20,
                     note="attention_bias switches q, k, v; o is never biased"),
    "ernie4_5": Family(head_dim_null="derived", kv_null="heads", bias_flags=(("use_bias", "qkvo", False),), head_dim_default=128, kv_default=2,
                       rope_theta=500000.0, note="interleaved RoPE pairs"),
}
# transformers 5.23's model types that are not families: read as a family (same attention code,
# same fields and defaults: "same_as"), or the reason they are not read (idlib/data/model_types.json)
_SURVEY = json.loads((Path(__file__).parent / "data" / "model_types.json").read_text())
MODEL_TYPES: dict[str, dict[str, Any]] = _SURVEY["model_types"]
MODEL_TYPES_VERSION: str = _SURVEY["_transformers"]
ALIASES = {mt: rec["family"] for mt, rec in MODEL_TYPES.items() if rec["kind"] == "same_as"}


def _as_row(key: str, value: Any) -> Any:
    """A Family field from JSON (lists are tuples in a Family; ``layers`` names a reader of
    LAYER_READERS and its arguments; ``fills`` is an object)."""
    if key == "layers":
        if value is None:
            return None
        reader, kwargs = value
        return LAYER_READERS[reader](**kwargs)
    if key == "fills":
        return tuple(value.items())
    return _tuple(value)


def _tuple(value: Any) -> Any:
    return tuple(_tuple(v) for v in value) if isinstance(value, list) else value


# model types read as a family with their own config class's defaults (and, where named in "code",
# the ways their code differs that AttentionConfig represents): benchmarks/model_type_rows.py
# writes the rows from transformers' config classes, tests/test_model_types_real.py checks them
# against the real modules
OWN_DEFAULTS: dict[str, Family] = {
    mt: replace(FAMILIES[rec["family"]], **{k: _as_row(k, v) for k, v in rec["row"].items()},
                harmless=tuple(rec["harmless"]))
    for mt, rec in MODEL_TYPES.items() if rec["kind"] == "own_defaults"}

# multimodal configs: the family of a text_config that does not name its own model_type
TEXT_FAMILY = {"gemma3": "gemma3_text", "qwen2_vl": "qwen2_vl_text", "qwen2_5_vl": "qwen2_5_vl_text",
               "llava": "llama", "llava_next": "llama", "mistral3": "mistral", "paligemma": "gemma",
               "llama4": "llama4_text"}
# the model_type of a text_config names the text model; some spell it as the multimodal one
TEXT_ALIASES = {"gemma3": "gemma3_text", "qwen2_vl": "qwen2_vl_text", "qwen2_5_vl": "qwen2_5_vl_text"}

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
    "sliding_window_pattern": "see sliding_window", "_sliding_window_pattern": "see sliding_window",
    "window_size": "see sliding_window",
    "rms_norm_eps": "the block's norms (outside the attention layer; chapter 9 for QK-norm eps)",
    "layer_norm_eps": "the block's norms", "layer_norm_epsilon": "the block's norms",
    "norm_epsilon": "the block's norms", "norm_eps": "the block's norms", "norm_type": "the block's norms",
    "mlp_bias": "the MLP, not attention", "use_parallel_residual": "the block, not attention",
    "parallel_attn": "the block, not attention",
    "apply_residual_connection_post_layernorm": "the block, not attention",
    "post_norm": "the block, not attention", "use_post_norm": "the block, not attention", "num_ln_in_parallel_attn": "the block, not attention",
    "head_dim": "read", "pretraining_tp": "a tensor-parallel slicing of the same matrices",
    "type_vocab_size": "token-type embeddings, not attention",
    "num_nextn_predict_layers": "extra prediction layers, not this layer",
    "first_k_dense_replace": "MLP kind per layer", "moe_layer_freq": "MLP kind per layer",
    "mlp_layer_types": "MLP kind per layer",
    "decoder_sparse_step": "MLP kind per layer", "mlp_only_layers": "MLP kind per layer",
    "norm_topk_prob": "MoE routing", "routed_scaling_factor": "MoE routing", "moe_norm_min": "MoE routing",
    "logits_scaling": "the LM head", "embedding_multiplier": "embeddings",
    "scale_embedding": "embeddings", "final_logit_softcapping": "the LM head, not attention",
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
    "slow_but_exact": "numerics only (BLOOM's tensor-parallel merge order)",
    "attn_temperature_tuning": "Llama 4's query scale log(floor((i + 1) / floor_scale) + 1) * attn_scale "
                               "+ 1 is exactly 1 on the first floor_scale - 1 positions (8,191 by default): "
                               "the count is reached on sequences shorter than that",
    "floor_scale": "see attn_temperature_tuning", "attn_scale": "see attn_temperature_tuning",
    "attention_chunk_size": "chunked attention: a window of c >= 2 tokens (see sliding_window)",
    "full_attention_interval": "read with layer_types (Qwen3-Next)",
    "softmax_scale": "a fixed score scale", "alibi_bias_max": "the ALiBi slopes' schedule: the count "
                     "holds for every slope vector outside a null set (chapter 10)",
    "attn_impl": "which kernel computes it, not what it computes",
    "attn_uses_sequence_id": "masks across packed sequences; one sequence sees full attention",
    "learned_pos_emb": "learned absolute positions (added to the inputs, not counted)",
    "linear_conv_kernel_dim": "the linear-attention layers (not counted)",
    "linear_key_head_dim": "the linear-attention layers (not counted)",
    "linear_value_head_dim": "the linear-attention layers (not counted)",
    "linear_num_key_heads": "the linear-attention layers (not counted)",
    "linear_num_value_heads": "the linear-attention layers (not counted)",
}
# a field whose name looks like it could shape attention must be read or listed in HARMLESS
_SUSPECT = re.compile(r"attn|attention|rope|rotary|qk|alibi|position|bias|softcap|head|window|"
                      r"causal|clip|lora|kv|norm|scal|layer_types|sink|gating|output_gate|nope")


def _number(data: dict[str, Any], name: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name}: field {key!r}={value!r} must be a finite number")
    return float(value)


WIDTH_KEYS = ("hidden_size", "n_embd", "d_model", "dim", "n_embed")
HEADS_KEYS = ("num_attention_heads", "n_head", "num_heads", "n_heads")


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
    if "text_config" in data and ("hidden_size" not in data or outer not in FAMILIES):
        inner = data["text_config"]
        if not isinstance(inner, dict):
            raise ConfigError(f"{name}: field 'text_config' must be a JSON object "
                              f"(got {type(inner).__name__})")
        mt = str(inner.get("model_type") or "").lower()
        return inner, TEXT_ALIASES.get(mt, mt) or TEXT_FAMILY.get(outer, "")
    return data, outer


def family_of(data: Any, name: str = "config", family: str | None = None) -> tuple[dict[str, Any], str, Family]:
    """(text dict, family name, Family); an unknown model_type is refused unless ``family`` names one.

    ``family`` names the family of a config whose model_type the reader does not know; a file
    whose model_type is a known family is read as that family (naming another one is refused:
    reading it as another family would drop what its own code does).
    """
    text, mt = text_part(data, name)
    if family is not None:
        key = str(family).lower()
        if key not in FAMILIES:
            raise ConfigError(f"family={family!r} is not a known family (known: {', '.join(sorted(FAMILIES))})")
        if mt in FAMILIES and mt != key:
            raise ConfigError(f"{name}: model_type {mt!r} is a family the reader knows; it is read as "
                              f"itself, never as family {key!r} (drop --family)")
        if mt in OWN_DEFAULTS:
            raise ConfigError(f"{name}: model_type {mt!r} is read as itself (the attention code of "
                              f"family {MODEL_TYPES[mt]['family']!r} with its own config class's "
                              f"defaults), never as family {key!r}, which would drop those defaults "
                              "(drop --family)")
        return text, key, FAMILIES[key]
    if mt in ALIASES:
        return text, ALIASES[mt], FAMILIES[ALIASES[mt]]
    if mt in OWN_DEFAULTS:
        fam = OWN_DEFAULTS[mt]
        return {**_fills(fam, text), **text}, mt, fam
    if mt not in FAMILIES:
        raise ConfigError(f"{name}: {unread_reason(mt)}")
    return text, mt, FAMILIES[mt]


PER_HEAD = "hidden_size / num_attention_heads"


def _fills(fam: Family, text: dict[str, Any]) -> dict[str, Any]:
    """The config class's defaults of the fields a model type's row fills in (PER_HEAD: the width
    per head, where the file gives both sizes; else left out, and the reader says what is missing)."""
    out = {}
    for key, value in fam.fills:
        if value == PER_HEAD:
            d, h = text.get("hidden_size"), text.get("num_attention_heads")
            if isinstance(d, int) and isinstance(h, int) and h > 0 and d % h == 0:
                out[key] = d // h
        else:
            out[key] = value
    return out


def unread_reason(model_type: str) -> str:
    """Why a model_type that is not a family is not read (the survey of transformers' model types,
    ``MODEL_TYPES``): not derived (the mechanism or structure named), no text softmax attention, or
    unknown to transformers 5.23 (never guessed)."""
    rec = MODEL_TYPES.get(model_type)
    what = f"model_type {model_type!r}" if model_type else "no model_type"
    if rec is None:
        return (f"{what} is not a family the reader knows; the attention function is never guessed "
                "(name the family with --family, e.g. --family llama, if it is one of: "
                f"{', '.join(sorted(FAMILIES))})")
    if rec["kind"] == "refused":
        return f"{what}: its attention is not derived ({rec['why']})"
    if rec["kind"] == "none":
        return f"{what} has no text softmax attention layer to count ({rec['why']})"
    return f"{what} is read (as family {rec.get('family')!r})"


def _flatten(text: dict[str, Any], fam: Family, name: str) -> dict[str, Any]:
    """The text config with the family's nested objects read as "outer.field" keys."""
    out = dict(text)
    for outer in fam.nested:
        inner = out.pop(outer, None)
        if inner is None:
            continue
        if not isinstance(inner, dict):
            raise ConfigError(f"{name}: field {outer!r} must be a JSON object")
        out.update({f"{outer}.{k}": v for k, v in inner.items()})
    return out


def _rope(text: dict[str, Any], fam: Family, name: str) -> tuple[float, list[float]]:
    """(rotary fraction, RoPE bases of the layer types) from either layout."""
    params = text.get("rope_parameters")
    if params is None and isinstance(text.get("rope_scaling"), dict):
        params = None          # old layout: rope_scaling only rescales frequencies (see table)
    key = fam.fraction_key                 # the other spelling is not read by the family's code
    fraction = text.get(key)
    nulls = [key] if key in text and fraction is None else []
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
            elif "partial_rotary_factor" in p:
                nulls.append("rope_parameters.partial_rotary_factor")
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
    if nulls and fam.partial and fraction is None:
        raise ConfigError(f"{name}: field {nulls[0]!r} is null, which this family's transformers "
                          "code does not accept (give the share, or leave the field out)")
    fraction = fam.rope_fraction if fraction is None else _number(text, name, key, fraction)
    return fraction, thetas


def _check_unread(text: dict[str, Any], fam: Family, name: str) -> None:
    known = set(COMMON_READS) | set(HARMLESS) | set(fam.reads) | set(fam.ignores) | \
        set(fam.harmless) | {f.lstrip("!") for f, _, _ in fam.bias_flags} | \
        {f for f, _, _ in fam.refuse_values} | {f for f, _ in fam.fills} | \
        set(fam.width_keys) | set(fam.heads_keys) | set(fam.layers_keys)
    if fam.alibi is not None:
        known.add(fam.alibi[0])
    if fam.qk_norm_flag is not None:
        known.add(fam.qk_norm_flag[0])
    for key in sorted(text):
        last = key.rpartition(".")[2]
        if last.startswith("_") or key in known or last in HARMLESS or not _SUSPECT.search(last):
            continue
        raise ConfigError(f"{name}: field {key!r} is not read for this family and could change the "
                          "attention function; it is refused, never ignored")


def _refusals(text: dict[str, Any], fam: Family, name: str) -> None:
    for key, value, what in fam.refuse_values:
        if key in text and text[key] == value and type(text[key]) is type(value):
            raise ConfigError(f"{name}: field {key!r}={value!r}: {what}, which is not derived for "
                              "this model type")
    pos = str(text.get("position_embedding_type") or "absolute").lower()
    if pos == "alibi" or (text.get("alibi") and not fam.reads_alibi):
        raise ConfigError(f"{name}: ALiBi position biases (field {'alibi' if text.get('alibi') else 'position_embedding_type'!r}) "
                          "are not read for this family (families with ALiBi: "
                          f"{', '.join(sorted(k for k, f in FAMILIES.items() if f.reads_alibi))})")
    if pos not in ("absolute", "rotary", "rope"):
        raise ConfigError(f"{name}: field 'position_embedding_type'={pos!r}: relative position "
                          "scores are not represented by AttentionConfig")
    for key in ("clip_qkv", "attn_config.clip_qkv"):
        if text.get(key) is not None:
            raise ConfigError(f"{name}: field {key!r}={text[key]!r} clamps q, k, v; the count "
                              "of a clipped layer is not derived")
    window = _get(text, "sliding_window")
    if window is not None and text.get("use_sliding_window", True) is not False:
        if isinstance(window, bool) or not isinstance(window, int):
            raise ConfigError(f"{name}: field 'sliding_window'={window!r} must be an integer")
        if 0 < window < 2:
            raise ConfigError(f"{name}: field 'sliding_window'={window} leaves each token only "
                              "itself; that count is not derived")


def _bias(text: dict[str, Any], fam: Family, name: str) -> str:
    """The biased projections: the family's fixed ones, and those its flags switch on (a flag
    written "!field" switches them on when the field is false)."""
    letters = set(fam.bias)
    for key, switched, default in fam.bias_flags:
        if key.startswith("!"):
            on = not _flag(text, name, key[1:], not default)
        else:
            on = _flag(text, name, key, default)
        if on:
            letters |= set(switched)
    return "".join(c for c in "qkvo" if c in letters)


def _qk_norm(text: dict[str, Any], fam: Family, name: str) -> str:
    if fam.qk_norm_flag is not None:
        key, kind, default = fam.qk_norm_flag
        return kind if _flag(text, name, key, default) else "none"
    return fam.qk_norm


def _kv_heads(text: dict[str, Any], fam: Family, n_heads: int, name: str) -> int:
    """The key/value heads as the family's code reads them: its own reader, or
    ``num_key_value_heads`` (absent: the config class's default; null: what the family's code
    does with a null, the head count or a refusal), or one per query head when it reads none."""
    if fam.kv_heads is not None:
        return _size(name, "num_key_value_heads", fam.kv_heads(text, n_heads, name))
    if not fam.reads_kv:
        return n_heads
    if "num_key_value_heads" in text and text["num_key_value_heads"] is None:
        if fam.kv_null == "heads":
            return n_heads
        raise ConfigError(f"{name}: field 'num_key_value_heads' is null, which this family's "
                          "transformers code does not accept (give the number of key/value heads)")
    n_kv = text.get("num_key_value_heads")
    if n_kv is None:
        n_kv = fam.kv_default if fam.kv_default is not None else n_heads
    return _size(name, "num_key_value_heads", n_kv)


def _head_dim(text: dict[str, Any], fam: Family, d_model: int, n_heads: int, name: str) -> int | None:
    """The query/key width as the family's code reads it: ``head_dim`` (T5: ``d_kv``, which a
    ``head_dim`` in the file overrides; absent: the config class's default; null: hidden / heads
    where the code derives it, else refused), or hidden / heads when it reads none."""
    key, value = None, None
    if fam.reads_head_dim:
        if "head_dim" in text and text["head_dim"] is None and fam.head_dim_null != "derived":
            raise ConfigError(f"{name}: field 'head_dim' is null, which this family's transformers "
                              "code does not accept (give the head width)")
        keys = ("head_dim", "d_kv") if "d_kv" in fam.reads else ("head_dim",)
        key, value = _synonym(text, keys, name)
        if key is None and "head_dim" not in text:
            value = fam.head_dim_default
    if value is None and d_model % n_heads == 0:
        value = d_model // n_heads
    return None if value is None else _size(name, key or "head_dim", value)


def _synonym(text: dict[str, Any], keys: tuple[str, ...], name: str) -> tuple[str | None, Any]:
    """(key, value) of the first non-null of fields that mean one thing (hidden_size, n_embd,
    ...); two that disagree are refused: transformers' config classes let an alias win over the
    field it maps to, an order the file does not show."""
    given = [(k, text[k]) for k in keys if text.get(k) is not None]
    if len({repr(v) for _, v in given}) > 1:
        shown = " and ".join(f"{k!r}={v!r}" for k, v in given)
        raise ConfigError(f"{name}: fields {shown} name one size and disagree (which one is meant "
                          "is never guessed)")
    return given[0] if given else (None, None)


def _size(name: str, key: str, value: Any) -> int:
    """A size read from the file: an integer of at least 1, named as the file names it."""
    value = _integer(name, key, value)
    if value < 1:
        raise ConfigError(f"{name}: field {key!r}={value} must be at least 1")
    return value


def ignored_fields(data: Any, name: str = "config", family: str | None = None) -> list[str]:
    """Fields of the file that the family's transformers code does not read (listed in the
    output, never counted): num_key_value_heads or head_dim where the code fixes them, and the
    family's ``ignores``."""
    text, _, fam = family_of(data, name, family)
    text = _flatten(text, fam, name)
    out = [key for key, read in (("num_key_value_heads", fam.reads_kv or fam.kv_heads is not None),
                                 ("head_dim", fam.reads_head_dim or fam.rotary_head_dim))
           if not read and key in text]
    if fam.rotary and not fam.latent and fam.rotary_dim is None:
        shares = ("partial_rotary_factor", "rotary_pct")
        out += [key for key in shares if key in text and (key != fam.fraction_key or not fam.partial)
                and text[key] not in (None, 1, 1.0)]
        params = text.get("rope_parameters")
        per_type = [params] if isinstance(params, dict) and ("rope_theta" in params or
                                                              "rope_type" in params) else \
            list(params.values()) if isinstance(params, dict) else []
        if not fam.partial and any(isinstance(p, dict) and p.get("partial_rotary_factor")
                                   not in (None, 1, 1.0) for p in per_type):
            out.append("rope_parameters.partial_rotary_factor")
    return out + [key for key in fam.ignores if key in text]


def _alibi(text: dict[str, Any], fam: Family, name: str) -> bool:
    if fam.always_alibi:
        return True
    return fam.alibi is not None and _flag(text, name, fam.alibi[0], fam.alibi[1])


def n_hidden_layers(data: Any, name: str = "config", family: str | None = None) -> int | None:
    """The model's number of layers (num_hidden_layers, n_layer, num_layers, MPT's n_layers)."""
    text, _, fam = family_of(data, name, family)
    value = _get(text, "num_hidden_layers", "n_layer", "num_layers", "n_layers", *fam.layers_keys)
    return None if value is None else _integer(name, "num_hidden_layers", value)


def attention_fields_from_hf(data: Any, name: str = "config", family: str | None = None) -> dict[str, Any]:
    """AttentionConfig keyword arguments for the attention layer described by ``data`` (of the
    first layer, where layers differ: :func:`model_from_hf` reads each).

    ``family`` names the family of a config whose model_type the reader does not know.  A
    multi-head latent attention config (DeepSeek) is refused here: :func:`latent_fields_from_hf`
    reads it (``config_from_hf`` picks the right one).
    """
    text, fam_name, fam = family_of(data, name, family)
    if fam.latent:
        raise ConfigError(f"{name}: family {fam_name!r} is multi-head latent attention, not an "
                          "AttentionConfig layer (read it with config_from_hf)")
    text = _flatten(text, fam, name)
    for key in fam.refused:
        if key in text:
            raise ConfigError(f"{name}: field {key!r}: this family's config class computes it "
                              "and refuses a file that sets it")
    width_key, d_model = _synonym(text, WIDTH_KEYS + fam.width_keys, name)
    if width_key is None:
        raise ConfigError(f"{name}: field 'hidden_size' is required")
    d_model = _size(name, width_key, d_model)
    heads_key, n_heads = _synonym(text, HEADS_KEYS + fam.heads_keys, name)
    if heads_key is None:
        raise ConfigError(f"{name}: field 'num_attention_heads' is required")
    n_heads = _size(name, heads_key, n_heads)
    qk_norm = _qk_norm(text, fam, name)
    _refusals(text, fam, name)
    _check_unread(text, fam, name)
    n_kv = _kv_heads(text, fam, n_heads, name)

    head_dim = _head_dim(text, fam, d_model, n_heads, name)

    alibi = _alibi(text, fam, name)
    rope_fraction, thetas = 0.0, [10000.0]
    if fam.rotary and not alibi:
        rope_fraction, thetas = _rope(text, fam, name)
        if fam.share_breaks and rope_fraction != 1.0:
            raise ConfigError(f"{name}: partial_rotary_factor={rope_fraction:g}: this family's "
                              "rotary code rotates whole heads and breaks on a share below 1")
        if not fam.partial:                        # its code rotates every dimension of each head,
            rope_fraction = 1.0                    # whatever share the file gives (listed as ignored)
        if fam.rotary_dim is not None:
            key, default = fam.rotary_dim
            rdim = text.get(key, default)          # the config class's default; null: all dims
            if rdim is not None and _integer(name, key, rdim) < 1:
                raise ConfigError(f"{name}: field {key!r}={rdim!r} must be at least 1: this "
                                  "family's code fails without a rotated dimension (null rotates all)")
            rope_fraction = 1.0 if rdim is None or head_dim is None else \
                _integer(name, key, rdim) / head_dim
        if fam.rotary_head_dim and text.get("head_dim") is not None and \
                _size(name, "head_dim", text["head_dim"]) != head_dim:
            raise ConfigError(f"{name}: field 'head_dim'={text['head_dim']!r} must equal "
                              f"{width_key} / {heads_key} = {head_dim}: this family's heads are "
                              "that wide, and its rotary embedding is sized by head_dim")
    if fam.heads_span_width and head_dim is not None and n_heads * head_dim != d_model:
        raise ConfigError(f"{name}: {heads_key} x head_dim = {n_heads} x {head_dim} must equal "
                          f"{width_key}={d_model}: this family's code sizes a projection or norm by "
                          f"{width_key}")
    if n_heads % fam.heads_multiple:
        raise ConfigError(f"{name}: {heads_key}={n_heads} must be a multiple of "
                          f"{fam.heads_multiple} (this family's fused projection)")
    causal = fam.causal
    if text.get("use_bidirectional_attention") and "use_bidirectional_attention" in fam.reads:
        causal = False
    if "is_decoder" in fam.reads:
        causal = _flag(text, name, "is_decoder", fam.causal)
    bias = _bias(text, fam, name)
    softcap = None                      # an explicit null switches the family's cap off
    if "attn_logit_softcapping" in fam.reads:
        softcap = text["attn_logit_softcapping"] if "attn_logit_softcapping" in text else fam.softcap
    if softcap is not None:
        softcap = _number(text, name, "attn_logit_softcapping", softcap)
    out = dict(d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim,
               rope_fraction=rope_fraction, rope_base=thetas[0], bias=bias, causal=causal,
               qk_norm=qk_norm, softcap=softcap, alibi=alibi, sinks=fam.sinks,
               output_gate=fam.output_gate)
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
    return family_of(data, name, family)[2].latent


def latent_fields_from_hf(data: Any, name: str = "config", family: str | None = None) -> dict[str, Any]:
    """LatentAttentionConfig keyword arguments of a DeepSeek V2 / V3 config (either layout).

    Read: hidden_size, num_attention_heads, kv_lora_rank, q_lora_rank (null: no query latent),
    qk_nope_head_dim, qk_rope_head_dim, v_head_dim (absent: DeepseekV3Config's defaults),
    attention_bias, the RoPE base; qk_head_dim and head_dim (the rotary width) must agree with
    them; num_key_value_heads is not used by the code (every head gets its keys from the latent).
    """
    text, fam_name, fam = family_of(data, name, family)
    if not fam.latent:
        raise ConfigError(f"{name}: family {fam_name!r} is not multi-head latent attention")
    _refusals(text, fam, name)
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
    """One row per family: positions, biases, QK-norm, the variants it uses, causal, defaults and
    fields read (for the docs)."""
    rows = []
    for key, f in sorted(FAMILIES.items()):
        flags = ", ".join(f"{k} -> {letters}" for k, letters, _ in f.bias_flags)
        positions = f"rope (fraction {f.rope_fraction:g}, base {f.rope_theta:g})" \
            if f.rotary else f.positions
        if f.alibi is not None:
            positions += f"; {f.alibi[0]} -> alibi"
        norm = "latent (MLA)" if f.latent else f.qk_norm
        if f.qk_norm_flag is not None:
            norm = f"{f.qk_norm_flag[0]} -> {f.qk_norm_flag[1]}"
        variants = [name for name, on in (("sinks", f.sinks), ("output gate", f.output_gate),
                                          ("layers differ", f.layers is not None
                                           and f.layers is not _window_layers)) if on]
        rows.append({"model_type": key, "positions": positions,
                     "biases": (f.bias or "none") + (f"; {flags}" if flags else ""),
                     "qk_norm": norm, "variants": ", ".join(variants) or "-",
                     "causal": "yes" if f.causal else "no",
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


def model_from_hf(source: Any, family: str | None = None) -> Model:
    """A Hugging Face config (a path or an already-parsed dict) as a whole model: its layers
    grouped by type (``idlib.model``), each type one attention layer, or the reason it has none.

    Families whose layers differ (``Family.layers``: RoPE on some layers only, linear attention on
    some) give several types; the others one.  ``family`` names the family of a config whose
    model_type the reader does not know.
    """
    return _model(*_load(source), family)


def model_from_data(data: Any, name: str = "config", family: str | None = None) -> Model:
    """``model_from_hf`` of already-parsed JSON, with the file's name for messages."""
    return _model(data, name, family)


def _model(data: Any, name: str, family: str | None) -> Model:
    text, fam_name, fam = family_of(data, name, family)
    n_layers = n_hidden_layers(data, name, family)
    listed = _listed_layers(text)
    if fam.latent:
        layer = LatentAttentionConfig(**latent_fields_from_hf(data, name, family))
        L = n_layers or 1
        return Model(name, fam_name, L, (LayerType(tuple(range(L)), layer),), n_layers is not None,
                     tuple(ignored_fields(data, name, family)))
    base = attention_fields_from_hf(data, name, family)
    L = n_layers or listed or fam.n_layers_default or 1
    overrides = fam.layers(_flatten(text, fam, name), L, name) if fam.layers else [{}] * L
    groups: dict[Any, list[int]] = {}
    for i, o in enumerate(overrides):
        key = ("skip", o["skip"]) if "skip" in o else tuple(sorted(o.items()))
        groups.setdefault(key, []).append(i)
    types = []
    for key, layers in groups.items():
        if key and key[0] == "skip":
            types.append(LayerType(tuple(layers), None, key[1]))
        else:
            types.append(LayerType(tuple(layers), _layer_config({**base, **dict(key)}, text, name)))
    return Model(name, fam_name, L, tuple(types), n_layers is not None or listed is not None,
                 tuple(ignored_fields(data, name, family)))


def _layer_config(fields_: dict[str, Any], text: dict[str, Any], name: str) -> AttentionConfig:
    """The AttentionConfig of the fields read, its rules' messages naming the file's fields
    (hidden_size for d_model, ...): the reader of the file knows those."""
    try:
        return AttentionConfig(**fields_)
    except ConfigError as e:
        message = str(e)
        width = next((k for k in WIDTH_KEYS if text.get(k) is not None), "hidden_size")
        heads = next((k for k in HEADS_KEYS if text.get(k) is not None), "num_attention_heads")
        for ours, theirs in (("d_model", width), ("n_kv_heads", "num_key_value_heads"),
                             ("n_heads", heads), ("head_dim", "head_dim")):
            message = re.sub(rf"\b{ours}=", f"{theirs}=", message)
        raise ConfigError(f"{name}: {message}") from None


def _listed_layers(text: dict[str, Any]) -> int | None:
    """The number of layers a per-layer list gives (layer_types, no_rope_layers), if any."""
    for key in ("layer_types", "no_rope_layers"):
        if isinstance(text.get(key), list):
            return len(text[key])
    return None


def config_from_hf(source: Any, family: str | None = None) -> AttentionConfig | LatentAttentionConfig:
    """Read a Hugging Face config.json (a path or an already-parsed dict): its one attention layer,
    an AttentionConfig, or a LatentAttentionConfig for multi-head latent attention (DeepSeek).

    Layers that are not softmax attention (``model_from_hf``) are left out; a model whose softmax
    layers differ is refused here (count it with :func:`model_from_hf` and
    :func:`idlib.model.count_model`, or ``idlib count --config``).  ``family`` names the family
    of a config whose model_type the reader does not know.
    """
    return _single(model_from_hf(source, family))


def _single(model: Model) -> AttentionConfig | LatentAttentionConfig:
    counted = model.counted
    if len(counted) == 1:
        return counted[0].config
    if not counted:
        raise ConfigError(f"{model.name}: no layer is softmax attention ({model.types[0].reason})")
    kinds = "; ".join(t.describe() for t in counted)
    raise ConfigError(f"{model.name}: its layers differ ({len(counted)} types: {kinds}); count the "
                      "whole model, layer type by layer type, with idlib.hf.model_from_hf or "
                      "`idlib count --config`")


def config_from_file(path: Any, family: str | None = None) -> AttentionConfig | LatentAttentionConfig:
    """A JSON file holding either AttentionConfig fields or a Hugging Face config."""
    data, name = read_json(path)
    if is_hf(data, family):
        return _single(_model(data, name, family))
    return AttentionConfig.from_dict(data, name)
