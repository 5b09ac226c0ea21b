"""AttentionConfig: the one description of an attention layer that every part of idlib reads.

A layer has ``n_heads`` query heads and ``n_kv_heads`` key/value heads (``n_kv_heads`` divides
``n_heads``; head ``h`` reads key/value group ``h // (n_heads // n_kv_heads)``), query/key
width ``head_dim``, value width ``value_dim``, a rotary share ``rope_fraction`` of each
query/key head, and biases on any subset of the projections ``q``, ``k``, ``v``, ``o``.

Variants (chapter 7; every one defaults to the plain layer above):

* ``qk_norm`` "none" | "plain" | "gain": RMS-normalise each head's query and key after the
  projection (and bias), before RoPE; "gain" then multiplies them by learned gains g_Q, g_K of
  size head_dim shared by all heads (Qwen3, Gemma 3).
* ``kv_latent`` C: keys and values from a shared C-dim latent X W_DKV through per-group up
  projections W_UK, W_UV (multi-head latent attention); ``latent_norm`` RMS-normalises it.
* ``input_centered``: the layer sees x - mean(x) (a LayerNorm without affine in front).
* ``n_layers`` L, ``kv_share`` S: a stack of L residual layers x + attn(x); each run of S
  consecutive layers shares one set of key/value projections (cross-layer attention).

Combinations whose count is not derived are refused with a ConfigError naming the rule.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A configuration that breaks a rule; the message names the field and the rule."""


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _positive_int(name: str, value: Any) -> int:
    if not _is_int(value):
        raise ConfigError(f"{name}={value!r} must be an integer")
    if value < 1:
        raise ConfigError(f"{name}={value} must be at least 1")
    return value


BIAS_LETTERS = "qkvo"
QK_NORMS = ("none", "plain", "gain")


@dataclass(frozen=True)
class AttentionConfig:
    """One self-attention layer (see the module docstring for the fields' meaning)."""

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

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen dataclass)
        _positive_int("d_model", self.d_model)
        _positive_int("n_heads", self.n_heads)
        if self.n_kv_heads is None:
            set_("n_kv_heads", self.n_heads)
        _positive_int("n_kv_heads", self.n_kv_heads)
        if self.n_kv_heads > self.n_heads or self.n_heads % self.n_kv_heads:
            raise ConfigError(
                f"n_heads={self.n_heads} must be divisible by n_kv_heads={self.n_kv_heads}")
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise ConfigError(
                    f"d_model={self.d_model} must be divisible by n_heads={self.n_heads} "
                    "when head_dim is not given")
            set_("head_dim", self.d_model // self.n_heads)
        _positive_int("head_dim", self.head_dim)
        if self.value_dim is None:
            set_("value_dim", self.head_dim)
        _positive_int("value_dim", self.value_dim)

        if isinstance(self.rope_fraction, bool) or not isinstance(self.rope_fraction, (int, float)):
            raise ConfigError(f"rope_fraction={self.rope_fraction!r} must be a number in [0, 1]")
        if not (0.0 <= self.rope_fraction <= 1.0):
            raise ConfigError(f"rope_fraction={self.rope_fraction} must be in [0, 1]")
        rot = self.rope_fraction * self.head_dim
        if abs(rot - round(rot)) > 1e-9 or round(rot) % 2:
            raise ConfigError(
                f"rope_fraction={self.rope_fraction} times head_dim={self.head_dim} "
                f"= {rot:g} must be an even integer (RoPE rotates pairs of dimensions)")
        set_("rope_fraction", float(self.rope_fraction))
        if self.rotary_dim and self.head_dim > self.d_model:
            raise ConfigError(
                f"head_dim={self.head_dim} must be at most d_model={self.d_model} when "
                "rope_fraction > 0 (the count for a rotary head wider than the model is not derived)")
        if isinstance(self.rope_base, bool) or not isinstance(self.rope_base, (int, float)) \
                or not math.isfinite(self.rope_base) or self.rope_base <= 0:
            raise ConfigError(f"rope_base={self.rope_base!r} must be a positive finite number")
        set_("rope_base", float(self.rope_base))

        if not isinstance(self.bias, str):
            raise ConfigError(f"bias={self.bias!r} must be a string of letters from 'qkvo'")
        bad = sorted(set(self.bias) - set(BIAS_LETTERS))
        if bad:
            raise ConfigError(
                f"bias={self.bias!r} may contain only the letters q, k, v, o (got {''.join(bad)!r})")
        if len(set(self.bias)) != len(self.bias):
            raise ConfigError(f"bias={self.bias!r} repeats a letter")
        set_("bias", "".join(c for c in BIAS_LETTERS if c in self.bias))
        if not isinstance(self.causal, bool):
            raise ConfigError(f"causal={self.causal!r} must be true or false")
        self._validate_variants()

    def _validate_variants(self) -> None:
        for name in ("latent_norm", "input_centered"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}={getattr(self, name)!r} must be true or false")
        if self.qk_norm not in QK_NORMS:
            raise ConfigError(f"qk_norm={self.qk_norm!r} must be one of {', '.join(QK_NORMS)}")
        if self.input_centered and self.d_model < 2:
            raise ConfigError(f"input_centered=True needs d_model >= 2 (got {self.d_model}: "
                              "a centred 1-dim input is always zero)")
        d_in = self.input_dim
        if self.rotary_dim and self.input_centered and self.head_dim > d_in:
            raise ConfigError(
                f"head_dim={self.head_dim} must be at most d_model - 1 = {d_in} when "
                "rope_fraction > 0 and input_centered=True (the count is not derived)")
        if self.qk_norm != "none":
            if self.head_dim < 2:
                raise ConfigError(f"qk_norm={self.qk_norm!r} needs head_dim >= 2 (a normalised "
                                  "1-dim head is a sign; its count is not derived)")
            if self.head_dim > d_in:
                raise ConfigError(
                    f"qk_norm={self.qk_norm!r} needs head_dim={self.head_dim} at most the input "
                    f"dimension {d_in} (d_model{' - 1, input_centered' if self.input_centered else ''}"
                    "); the count for a wider normalised head is not derived")
        C = self.kv_latent
        if C is not None:
            _positive_int("kv_latent", C)
            if self.rotary_dim and self.head_dim > C:
                raise ConfigError(
                    f"head_dim={self.head_dim} must be at most kv_latent={C} when rope_fraction > 0 "
                    "(the count for a rotary head wider than the latent is not derived)")
            if self.qk_norm != "none" and self.head_dim > C:
                raise ConfigError(
                    f"qk_norm={self.qk_norm!r} needs head_dim={self.head_dim} at most kv_latent={C} "
                    "(the count for a normalised head wider than the latent is not derived)")
            if self.latent_norm and not (2 <= C <= d_in):
                raise ConfigError(
                    f"latent_norm=True needs 2 <= kv_latent <= {d_in} (the input dimension; got "
                    f"kv_latent={C}): the count for other latent widths is not derived")
        elif self.latent_norm:
            raise ConfigError("latent_norm=True needs kv_latent (there is no latent to normalise)")
        _positive_int("n_layers", self.n_layers)
        _positive_int("kv_share", self.kv_share)
        if self.n_layers % self.kv_share:
            raise ConfigError(
                f"kv_share={self.kv_share} must divide n_layers={self.n_layers}")
        if self.n_layers > 1:
            if C is not None:
                raise ConfigError("kv_latent with n_layers > 1 is not derived (use one layer)")
            if self.input_centered:
                raise ConfigError("input_centered=True with n_layers > 1 is not derived (only the "
                                  "first layer of a residual stack sees centred inputs)")
            if self.has_bias("v") or self.has_bias("o"):
                raise ConfigError(
                    f"bias={self.bias!r} with n_layers > 1: value and output biases (letters v, o) "
                    "shift the residual stream between layers; that count is not derived")

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

    def replace(self, **changes: Any) -> "AttentionConfig":
        """A copy with some fields changed (validated again)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return AttentionConfig(**values)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    # -- reading configs -----------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> "AttentionConfig":
        """Build from a dict of AttentionConfig fields; unknown fields are refused."""
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: must be a JSON object of AttentionConfig fields")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"{source}: unknown field {unknown[0]!r} (known fields: {', '.join(sorted(known))})")
        if "d_model" not in data:
            raise ConfigError(f"{source}: field 'd_model' is required")
        return cls(**data)

    @classmethod
    def from_hf(cls, source: str | Path | dict[str, Any], approximate: bool = False) -> "AttentionConfig":
        """Read a Hugging Face style config.json (a path or an already-parsed dict).

        Architectures the layer model cannot represent are refused, unless ``approximate``
        (then ``idlib.hf.approximation_note`` says what the approximation leaves out).
        """
        data, name = _load_json(source)
        return cls(**_hf_fields(data, name, approximate))

    @classmethod
    def from_file(cls, path: str | Path) -> "AttentionConfig":
        """A JSON file holding either AttentionConfig fields or a Hugging Face config."""
        data, name = _load_json(path)
        if isinstance(data, dict) and any(k in data for k in ("hidden_size", "n_embd", "model_type")):
            return cls(**_hf_fields(data, name))
        return cls.from_dict(data, name)


def _hf_fields(data: Any, name: str, approximate: bool = False) -> dict[str, Any]:
    from .hf import attention_fields_from_hf
    return attention_fields_from_hf(data, name, approximate)


def _load_json(source: str | Path | dict[str, Any]) -> tuple[Any, str]:
    if isinstance(source, dict):
        return source, "config"
    path = Path(source)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"config file {str(path)!r}: cannot be read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path.name!r}: not UTF-8 text") from None
    try:
        return json.loads(text), path.name
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"config file {path.name!r}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})"
        ) from None
