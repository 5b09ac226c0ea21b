"""The rules of single fields, as functions: each checks one value and returns it normalised.

A rule is ``check(name, value) -> value`` and raises :class:`ConfigError` with one line naming
the field and the rule.  The variant rows (:mod:`idlib.variants`) say which rule each of their
fields follows; :class:`idlib.config.AttentionConfig` applies them.  This module sits below both.
"""
from __future__ import annotations

import math
from typing import Any, Callable


class ConfigError(ValueError):
    """A configuration that breaks a rule; the message names the field and the rule."""


MAX_SIZE = 2 ** 53              # integer sizes above this cannot be counted as floats can hold them
MAX_SEED = 2 ** 63 - 1          # torch seeds are 64-bit; random_inputs adds an offset
BIAS_LETTERS = "qkvo"

Check = Callable[[str, Any], Any]


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


def integer(name: str, value: Any) -> int:
    """An integer size in [1, 2**53]."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{name}={show(value)} must be an integer")
    if value < 1:
        raise ConfigError(f"{name}={show(value)} must be at least 1")
    if value > MAX_SIZE:
        raise ConfigError(f"{name}={show(value)} must be at most 2**53 = {MAX_SIZE} "
                          "(larger sizes have no meaningful count)")
    return value


def optional_integer(name: str, value: Any) -> int | None:
    """None, or an integer size (``integer``)."""
    return None if value is None else integer(name, value)


def integer_argument(name: str, value: Any, low: int = 1, high: int = MAX_SIZE) -> int:
    """``value`` (a NumPy integer too) as an int in [low, high], else a ConfigError naming ``name``."""
    value = plain(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConfigError(f"{name}={show(value)} must be an integer in [{low}, {high}]")
    return value


def fraction(name: str, value: Any) -> float:
    """A number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name}={show(value)} must be a number in [0, 1]")
    if not (0 <= value <= 1):
        raise ConfigError(f"{name}={show(value)} must be in [0, 1]")
    return float(value)


def positive(name: str, value: Any) -> float:
    """A positive finite number."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and value > 0
    try:
        ok = ok and math.isfinite(float(value))
    except OverflowError:                       # an int beyond the float range
        ok = False
    if not ok:
        raise ConfigError(f"{name}={show(value)} must be a positive finite number")
    return float(value)


def optional_positive(name: str, value: Any) -> float | None:
    """None, or a positive finite number."""
    return None if value is None else positive(name, value)


def letters(name: str, value: Any) -> str:
    """A subset of the letters q, k, v, o, returned in that order."""
    if not isinstance(value, str):
        raise ConfigError(f"{name}={show(value)} must be a string of letters from 'qkvo'")
    bad = sorted(set(value) - set(BIAS_LETTERS))
    if bad:
        raise ConfigError(
            f"{name}={show(value)} may contain only the letters q, k, v, o (got {''.join(bad)!r})")
    if len(set(value)) != len(value):
        raise ConfigError(f"{name}={show(value)} repeats a letter")
    return "".join(c for c in BIAS_LETTERS if c in value)


def boolean(name: str, value: Any) -> bool:
    """true or false (not 0 / 1)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name}={show(value)} must be true or false")
    return value


def one_of(choices: tuple[str, ...]) -> Check:
    """A rule: the value is one of ``choices``."""
    def check(name: str, value: Any) -> str:
        if not isinstance(value, str) or value not in choices:
            raise ConfigError(f"{name}={show(value)} must be one of {', '.join(choices)}")
        return value
    return check
