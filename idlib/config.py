"""AttentionConfig: the one description of an attention layer that every part of idlib reads.

A layer has ``n_heads`` query heads and ``n_kv_heads`` key/value heads (``n_kv_heads`` divides
``n_heads``; head ``h`` reads key/value group ``h // (n_heads // n_kv_heads)``), query/key
width ``head_dim``, value width ``value_dim``, a rotary share ``rope_fraction`` of each
query/key head, and biases on any subset of the projections ``q``, ``k``, ``v``, ``o``.
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

    # -- derived sizes -------------------------------------------------------------------
    @property
    def group_size(self) -> int:
        """Query heads per key/value head, m = H / G."""
        return self.n_heads // self.n_kv_heads

    @property
    def rotary_dim(self) -> int:
        """Rotated dimensions per query/key head, r = rope_fraction * head_dim (even)."""
        return int(round(self.rope_fraction * self.head_dim))

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
    def from_hf(cls, source: str | Path | dict[str, Any]) -> "AttentionConfig":
        """Read a Hugging Face style config.json (a path or an already-parsed dict)."""
        data, name = _load_json(source)
        return cls(**_hf_fields(data, name))

    @classmethod
    def from_file(cls, path: str | Path) -> "AttentionConfig":
        """A JSON file holding either AttentionConfig fields or a Hugging Face config."""
        data, name = _load_json(path)
        if isinstance(data, dict) and any(k in data for k in ("hidden_size", "n_embd", "model_type")):
            return cls(**_hf_fields(data, name))
        return cls.from_dict(data, name)


def _hf_fields(data: Any, name: str) -> dict[str, Any]:
    from .hf import attention_fields_from_hf
    return attention_fields_from_hf(data, name)


def _load_json(source: str | Path | dict[str, Any]) -> tuple[Any, str]:
    if isinstance(source, dict):
        return source, "config"
    path = Path(source)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"config file {str(path)!r}: cannot be read ({e.strerror})") from None
    try:
        return json.loads(text), path.name
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"config file {path.name!r}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})"
        ) from None
