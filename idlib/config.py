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
import math
import os
import stat
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable


class ConfigError(ValueError):
    """A configuration that breaks a rule; the message names the field and the rule."""


MAX_SIZE = 2 ** 53              # integer sizes above this cannot be counted as floats can hold them
MAX_CONFIG_BYTES = 1 << 20      # a config file larger than 1 MiB is refused unread
BIAS_LETTERS = "qkvo"
QK_NORMS = ("none", "plain", "gain", "whole", "layernorm", "layernorm_shared")
DERIVED = ("n_kv_heads", "head_dim", "value_dim")   # fields whose default is derived from others


def show(value: Any) -> str:
    """repr of a value for a one-line message (huge integers by their size, not their digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10 ** 30:
        return f"{'-' if value < 0 else ''}<an integer of {abs(value).bit_length()} bits>"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def plain(value: Any) -> Any:
    """A NumPy scalar (np.int64, np.float32, np.bool_, np.str_) as its Python value; else itself."""
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        return value.item()
    return value


# -- the rules, as data: field -> (check returning the normalised value, rule text) ----------

def _integer(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{name}={show(value)} must be an integer")
    if value < 1:
        raise ConfigError(f"{name}={show(value)} must be at least 1")
    if value > MAX_SIZE:
        raise ConfigError(f"{name}={show(value)} must be at most 2**53 = {MAX_SIZE} "
                          "(larger sizes have no meaningful count)")
    return value


MAX_SEED = 2 ** 63 - 1          # torch seeds are 64-bit; random_inputs adds an offset


def integer_argument(name: str, value: Any, low: int = 1, high: int = MAX_SIZE) -> int:
    """``value`` (a NumPy integer too) as an int in [low, high], else a ConfigError naming ``name``."""
    value = plain(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConfigError(f"{name}={show(value)} must be an integer in [{low}, {high}]")
    return value


def _fraction(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name}={show(value)} must be a number in [0, 1]")
    if not (0 <= value <= 1):
        raise ConfigError(f"{name}={show(value)} must be in [0, 1]")
    return float(value)


def _softcap(name: str, value: Any) -> float:
    """A logit soft-cap c (scores -> c tanh(scores / c)): a positive finite number."""
    return _base(name, value)


def _base(name: str, value: Any) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and value > 0
    try:
        ok = ok and math.isfinite(float(value))
    except OverflowError:                       # an int beyond the float range
        ok = False
    if not ok:
        raise ConfigError(f"{name}={show(value)} must be a positive finite number")
    return float(value)


def _letters(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{name}={show(value)} must be a string of letters from 'qkvo'")
    bad = sorted(set(value) - set(BIAS_LETTERS))
    if bad:
        raise ConfigError(
            f"{name}={show(value)} may contain only the letters q, k, v, o (got {''.join(bad)!r})")
    if len(set(value)) != len(value):
        raise ConfigError(f"{name}={show(value)} repeats a letter")
    return "".join(c for c in BIAS_LETTERS if c in value)


def _boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{name}={show(value)} must be true or false")
    return value


def _qk_norm(name: str, value: Any) -> str:
    if not isinstance(value, str) or value not in QK_NORMS:
        raise ConfigError(f"{name}={show(value)} must be one of {', '.join(QK_NORMS)}")
    return value


Check = Callable[[str, Any], Any]
# every field's type and range; None (a derived default, or no latent) skips the check
RULES: dict[str, Check] = {
    "d_model": _integer, "n_heads": _integer, "n_kv_heads": _integer, "head_dim": _integer,
    "value_dim": _integer, "rope_fraction": _fraction, "rope_base": _base, "bias": _letters,
    "causal": _boolean, "qk_norm": _qk_norm, "kv_latent": _integer, "latent_norm": _boolean,
    "input_centered": _boolean, "n_layers": _integer, "kv_share": _integer, "softcap": _softcap,
}


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

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen dataclass)
        set_("_explicit", frozenset(n for n in DERIVED if getattr(self, n) is not None))
        for name, check in RULES.items():
            value = plain(getattr(self, name))
            if value is not None or name not in DERIVED + ("kv_latent", "softcap"):
                set_(name, check(name, value))
        # -- the fields must describe a layer -----------------------------------------------
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
        rot = self.rope_fraction * self.head_dim
        if abs(rot - round(rot)) > max(1e-9, 4 * math.ulp(rot)) or round(rot) % 2:
            raise ConfigError(
                f"rope_fraction={self.rope_fraction} times head_dim={self.head_dim} "
                f"= {rot:g} must be an even integer (RoPE rotates pairs of dimensions)")
        if self.input_centered and self.d_model < 2:
            raise ConfigError(f"input_centered=True needs d_model >= 2 (got {self.d_model}: "
                              "a centred 1-dim input is always zero)")
        if self.latent_norm and self.kv_latent is None:
            raise ConfigError("latent_norm=True needs kv_latent (there is no latent to normalise)")
        if self.n_layers % self.kv_share:
            raise ConfigError(f"kv_share={self.kv_share} must divide n_layers={self.n_layers}")
        if self.n_layers > 1 and self.kv_latent is not None:   # param_shapes has no stacked latent
            raise ConfigError("kv_latent with n_layers > 1 is not derived (use one layer)")

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
        return json.loads(text), name
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"config file {name!r}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})"
        ) from None
    except RecursionError:
        raise ConfigError(f"config file {name!r}: JSON nested too deeply") from None


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
