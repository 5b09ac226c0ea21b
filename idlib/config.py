"""AttentionConfig: the one description of an attention layer that every part of idlib reads.

A layer has ``n_heads`` query heads and ``n_kv_heads`` key/value heads (``n_kv_heads`` divides
``n_heads``; head ``h`` reads key/value group ``h // (n_heads // n_kv_heads)``), query/key
width ``head_dim``, value width ``value_dim``, a rotary share ``rope_fraction`` of each
query/key head, and biases on any subset of the projections ``q``, ``k``, ``v``, ``o``.

Variants (chapter 7; every one defaults to the plain layer above):

* ``qk_norm`` "none" | "plain" | "gain": RMS-normalise each head's query and key after the
  projection (and bias), before RoPE; "gain" then multiplies them by learned gains g_Q, g_K of
  size head_dim shared by all heads (Qwen3, Gemma 3); "whole" RMS-normalises the whole
  projected query (all H heads, width H k) and key (G k) with gains g_Q (H, k), g_K (G, k)
  (OLMo 2, OLMoE); "layernorm": a LayerNorm (mean subtracted) on each head with gains per head
  g_Q (H, k), g_K (G, k) (StableLM, Cohere); "layernorm_shared": one LayerNorm with gain g and
  shift c shared by the heads, g_Q, c_Q, g_K, c_K (k,) (Persimmon, Phi).
* ``kv_latent`` C: keys and values from a shared C-dim latent X W_DKV through per-group up
  projections W_UK, W_UV (multi-head latent attention); ``latent_norm`` RMS-normalises it.
* ``input_centered``: the layer sees x - mean(x) (a LayerNorm without affine in front).
* ``n_layers`` L, ``kv_share`` S: a stack of L residual layers x + attn(x); each run of S
  consecutive layers shares one set of key/value projections (cross-layer attention).

Validation is data: ``RULES`` gives every field's type and range (one line each); the rules
that tie fields into a layer follow in ``__post_init__``.  A valid layer need not have a derived
count: the rules saying which layers do live beside the formulas, ``idlib.counting.check_derived``
(``count`` refuses the others with a ConfigError).
NumPy scalars are accepted as their Python values.  Every invalid value raises ConfigError
(one line naming the field and the rule).

Reading files: ``read_json`` reads a config file once (regular files and pipes, at most
``MAX_CONFIG_BYTES``).  Hugging Face configs are read by ``idlib.hf`` (``config_from_hf``,
``config_from_file``), which imports this module, never the other way round.
"""
from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from . import variants
from .fields import (MAX_SEED, MAX_SIZE, BIAS_LETTERS, Check, ConfigError,  # noqa: F401 (re-exported)
                     integer_argument, plain, show)
from .fields import boolean as _boolean, integer as _integer, positive as _base  # noqa: F401


DERIVED = ("n_kv_heads", "head_dim", "value_dim")   # fields whose default is derived from others
OPTIONAL = DERIVED + ("kv_latent", "softcap")         # fields whose None is a value (not checked)
MAX_CONFIG_BYTES = 1 << 20      # a config file larger than 1 MiB is refused unread
QK_NORMS = variants.qk_norm.QK_NORMS
# every field's type and range, from the variant rows (idlib.variants); None skips OPTIONAL ones
RULES: dict[str, Check] = variants.rules()


@dataclass(frozen=True)
class AttentionConfig:
    """One self-attention layer (see the module docstring for the fields' meaning).

    ``n_kv_heads`` (default H), ``head_dim`` (default d / H) and ``value_dim`` (default k) are
    derived when not given; ``replace`` derives them again unless they were given explicitly.
    """

    d_model: int
    n_heads: int = 1
    n_kv_heads: int | None = None
    head_dim: int | None = None
    value_dim: int | None = None
    rope_fraction: float = 0.0
    rope_base: float = 10000.0
    bias: str = ""
    causal: bool = False
    qk_norm: str = "none"
    kv_latent: int | None = None
    latent_norm: bool = False
    input_centered: bool = False
    n_layers: int = 1
    kv_share: int = 1
    softcap: float | None = None
    alibi: bool = False
    sinks: bool = False
    output_gate: bool = False

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen dataclass)
        set_("_explicit", frozenset(n for n in DERIVED if getattr(self, n) is not None))
        for name, check in RULES.items():
            value = plain(getattr(self, name))
            if value is not None or name not in OPTIONAL:
                set_(name, check(name, value))
        # -- the fields must describe a layer: the heads first (their defaults), then each row --
        if self.n_kv_heads is None:
            set_("n_kv_heads", self.n_heads)
        if self.n_kv_heads > self.n_heads or self.n_heads % self.n_kv_heads:
            raise ConfigError(
                f"n_heads={self.n_heads} must be divisible by n_kv_heads={self.n_kv_heads}")
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise ConfigError(
                    f"d_model={self.d_model} must be divisible by n_heads={self.n_heads} "
                    "when head_dim is not given")
            set_("head_dim", self.d_model // self.n_heads)
        if self.value_dim is None:
            set_("value_dim", self.head_dim)
        for row in variants.ROWS:
            if row.relations is not None:
                row.relations(self)

    # -- derived sizes -------------------------------------------------------------------
    @property
    def group_size(self) -> int:
        """Query heads per key/value head, m = H / G."""
        return self.n_heads // self.n_kv_heads

    @property
    def rotary_dim(self) -> int:
        """Rotated dimensions per query/key head, r = rope_fraction * head_dim (even)."""
        return int(round(self.rope_fraction * self.head_dim))

    @property
    def input_dim(self) -> int:
        """Dimension of the inputs the projections see: d_model, or d_model - 1 when centred."""
        return self.d_model - 1 if self.input_centered else self.d_model

    @property
    def n_kv_sets(self) -> int:
        """Distinct key/value projection sets in the stack, n_layers / kv_share."""
        return self.n_layers // self.kv_share

    def has_bias(self, letter: str) -> bool:
        return letter in self.bias

    def explicit(self) -> dict[str, Any]:
        """The fields as given: derived defaults (n_kv_heads, head_dim, value_dim) left out
        unless they were given explicitly."""
        return {k: v for k, v in self.to_dict().items()
                if k not in DERIVED or k in self._explicit}  # type: ignore[attr-defined]

    def replace(self, **changes: Any) -> "AttentionConfig":
        """A copy with some fields changed (validated again; derived defaults derived again)."""
        return AttentionConfig(**(self.explicit() | changes))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Any, source: str = "config") -> "AttentionConfig":
        """Build from a dict of AttentionConfig fields; unknown fields are refused."""
        return cls(**check_fields(data, source))


def check_fields(data: Any, source: str = "config") -> dict[str, Any]:
    """``data`` as AttentionConfig keyword arguments: a dict, known fields only, d_model given."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: must be a JSON object of AttentionConfig fields")
    known = [f.name for f in fields(AttentionConfig)]
    unknown = sorted(str(k) for k in set(data) - set(known))
    if unknown:
        raise ConfigError(
            f"{source}: unknown field {show(unknown[0])} (known fields: {', '.join(sorted(known))})")
    if "d_model" not in data:
        raise ConfigError(f"{source}: field 'd_model' is required")
    return dict(data)


# -- reading config files -------------------------------------------------------------------

class _DuplicateKey(Exception):
    """A JSON object with one key twice (json would keep the last silently)."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def read_json(source: str | os.PathLike) -> tuple[Any, str]:
    """(parsed JSON, display name) of a config file, read once.

    Regular files and pipes (``<(cat f)``, ``/dev/stdin``) of at most MAX_CONFIG_BYTES bytes;
    anything else (a directory, ``/dev/zero``) is refused with a ConfigError.
    """
    if not isinstance(source, (str, os.PathLike)):
        raise ConfigError(f"config file {show(source)}: must be a path")
    text_path = os.fspath(source)
    if not isinstance(text_path, str) or not text_path.strip():
        raise ConfigError("config file path is empty (give the path of a JSON file)")
    path = Path(text_path)
    name = path.name or text_path
    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
                raise ConfigError(f"config file {name!r}: not a regular file or a pipe")
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"config file {text_path!r}: cannot be read ({e.strerror})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {name!r}: larger than {MAX_CONFIG_BYTES} bytes "
                          "(a config is a few hundred)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"config file {name!r}: not UTF-8 text") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates), name
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"config file {name!r}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})"
        ) from None
    except RecursionError:
        raise ConfigError(f"config file {name!r}: JSON nested too deeply") from None
    except _DuplicateKey as e:
        raise ConfigError(f"config file {name!r}: field {e.args[0]!r} appears twice (which one "
                          "is meant is never guessed)") from None
    except ValueError:                               # an integer of more than 4,300 digits
        raise ConfigError(f"config file {name!r}: a number with more than "
                          f"{sys.get_int_max_str_digits()} digits; no count can mean it") from None


# -- multi-head latent attention (DeepSeek V2, V3) -------------------------------------------

def _even(name: str, value: Any) -> int:
    value = _integer(name, value)
    if value % 2:
        raise ConfigError(f"{name}={value} must be even (RoPE rotates pairs of dimensions)")
    return value


def _optional_integer(name: str, value: Any) -> int | None:
    return None if value is None else _integer(name, value)


LATENT_RULES: dict[str, Check] = {
    "d_model": _integer, "n_heads": _integer, "kv_latent": _integer, "nope_dim": _integer,
    "rope_dim": _even, "value_dim": _integer, "q_latent": _optional_integer, "rope_base": _base,
    "bias": _boolean, "causal": _boolean,
}


@dataclass(frozen=True)
class LatentAttentionConfig:
    """Multi-head latent attention (DeepSeek V2, V3; ``transformers``' DeepseekV3Attention).

    With u = rms(x W_DQ + b_DQ) g_DQ (C_Q = ``q_latent`` dims; without a query latent u = x) and
    c = rms(x W_DKV + b_DKV) g_DKV (C = ``kv_latent`` dims), head h reads
    q^h = [u W_UQ^h, R(t) u W_QR^h] (n = ``nope_dim`` and p = ``rope_dim`` dims),
    k^h = [c W_UK^h, R(s) (x W_KR + b_KR)] (the RoPE key is shared by all heads),
    v^h = c W_UV^h (``value_dim``), and the output is sum_h softmax(q^h k^h / sqrt(n + p)) v^h W_O^h
    + b_O.  ``bias`` is ``attention_bias``: b_DQ, b_DKV, b_KR and b_O (the up projections have none).
    """

    d_model: int
    n_heads: int
    kv_latent: int
    nope_dim: int
    rope_dim: int
    value_dim: int
    q_latent: int | None = None
    rope_base: float = 10000.0
    bias: bool = False
    causal: bool = True

    def __post_init__(self) -> None:
        for name, check in LATENT_RULES.items():
            object.__setattr__(self, name, check(name, plain(getattr(self, name))))

    @property
    def query_input(self) -> int:
        """Width a_Q of what the query up projections read: q_latent, or d_model without one."""
        return self.d_model if self.q_latent is None else self.q_latent

    def rope_head(self) -> AttentionConfig:
        """The RoPE parts as a layer of their own: one fully rotary head of rope_dim dims (its
        rotations, frequencies and classes are those of every head's RoPE query and the key)."""
        return AttentionConfig(d_model=self.rope_dim, n_heads=1, rope_fraction=1.0,
                               rope_base=self.rope_base)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def replace(self, **changes: Any) -> "LatentAttentionConfig":
        """A copy with some fields changed (validated again)."""
        return LatentAttentionConfig(**(self.to_dict() | changes))
