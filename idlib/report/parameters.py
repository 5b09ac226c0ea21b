"""Checks for a chapter's ``parameters`` cell: every knob named, with its rule, before any work.

A chapter's first code cell holds its knobs (papermill overrides them with ``-p NAME VALUE``
in a cell it injects right after it). The next cell starts by calling ``check_parameters``
(after any profile-dependent overrides), so that a wrong value fails there, before any work, with
one line naming the knob and the rule, e.g. ``ParameterError: steps=-5 must be a positive
integer``, instead of a late, anonymous error deep in a computation::

    check_parameters(dict(profile=profile, seed=seed, widths=widths, steps=steps),
                     profile=PROFILE, seed=NONNEGATIVE_INT, widths=list_of(POSITIVE_INT),
                     steps=POSITIVE_INT)

A rule is a predicate with the words that state it; ``list_of``, ``one_of`` and ``between``
build new ones, ``layer`` one for a knob that holds a layer (checked by building it, the
layer's own rule in the message). Integers are exact Python (or NumPy) integers, never bools.

A knob whose value depends on the profile is ``None`` in the parameters cell ("the profile's
value"); ``with_profile`` fills only those, so ``-p steps 50 -p profile full`` runs 50 steps
at the full profile's other sizes, and a value the user passed is checked, never replaced.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ..config import AttentionConfig, ConfigError

PROFILES = ("default", "full")


class ParameterError(ValueError):
    """A parameters-cell knob breaks its rule (the message names both)."""


@dataclass(frozen=True)
class Rule:
    """``holds(value)`` is True when the value is acceptable; ``text`` says the rule in words;
    ``reason(value)``, where given, says why a value that holds the shape fails (a layer's own
    rule), or None."""

    text: str
    holds: Callable[[Any], bool]
    reason: Callable[[Any], str | None] | None = None

    def why(self, value: Any) -> str | None:
        """Why ``value`` breaks the rule ("must be ..." or the reason), None when it keeps it."""
        if not self.holds(value):
            return f"must be {self.text}"
        return self.reason(value) if self.reason is not None else None


def _is_int(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _is_real(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and x == x  # not NaN


POSITIVE_INT = Rule("a positive integer", lambda x: _is_int(x) and x > 0)
NONNEGATIVE_INT = Rule("a non-negative integer", lambda x: _is_int(x) and x >= 0)
POSITIVE_REAL = Rule("a positive finite number", lambda x: _is_real(x) and 0 < x < float("inf"))
BOOL = Rule("True or False", lambda x: isinstance(x, bool))


def one_of(choices: Iterable[Any]) -> Rule:
    """The value must be one of ``choices`` (compared exactly, so 'Full' is not 'full')."""
    choices = tuple(choices)
    return Rule("one of " + ", ".join(repr(c) for c in choices), lambda x: x in choices)


def between(lo: float, hi: float, integer: bool = False) -> Rule:
    """lo <= value <= hi (an integer if ``integer``)."""
    kind = "an integer" if integer else "a number"
    ok = _is_int if integer else _is_real
    return Rule(f"{kind} in [{lo:g}, {hi:g}]", lambda x: ok(x) and lo <= x <= hi)


def list_of(rule: Rule, min_len: int = 1) -> Rule:
    """A non-empty list (or tuple) whose every entry satisfies ``rule``."""
    def reason(x: Any) -> str | None:
        for i, v in enumerate(x):
            why = rule.why(v)
            if why is not None:
                return f"entry {i} ({v!r}): {why}"
        return None
    return Rule(f"a list of at least {min_len} entries, each {rule.text}",
                lambda x: isinstance(x, (list, tuple)) and len(x) >= min_len
                and all(rule.holds(v) for v in x), reason if rule.reason is not None else None)


def layer(**fixed: Any) -> Rule:
    """A dict of ``AttentionConfig`` fields that, with ``fixed`` (fields the chapter sets
    itself, e.g. ``bias="qkvo"``), builds a layer; a layer that does not build is refused with
    its own rule (``d_model=8 must be divisible by n_heads=3``)."""
    def reason(x: dict[str, Any]) -> str | None:
        clash = sorted(set(x) & set(fixed))
        if clash:
            return f"field {clash[0]!r} is set by the chapter ({clash[0]}={fixed[clash[0]]!r})"
        try:
            AttentionConfig(**x, **fixed)
        except ConfigError as e:
            return str(e)
        except TypeError as e:
            return str(e).replace("AttentionConfig.__init__() ", "")
        return None
    text = "a dict of AttentionConfig fields (names to values)" + \
        (f" besides {', '.join(sorted(fixed))}" if fixed else "")
    return Rule(text, lambda x: isinstance(x, dict) and all(isinstance(k, str) for k in x), reason)


def with_profile(profile: str, given: dict[str, Any], profiles: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The knobs: each one given (not None) as given, each None from ``profiles[profile]``.

    Every knob of ``profiles[...]`` must be in ``given`` (None there: "the profile's value").
    """
    if profile not in profiles:
        raise ParameterError(f"profile={profile!r} must be one of "
                             + ", ".join(repr(p) for p in profiles))
    table = profiles[profile]
    unknown = sorted(set(table) - set(given))
    if unknown:
        raise ParameterError(f"with_profile: profile knobs not in the parameters cell: {unknown}")
    return {k: (table[k] if v is None and k in table else v) for k, v in given.items()}


PROFILE = one_of(PROFILES)


def check_parameters(values: dict[str, Any], **rules: Rule) -> None:
    """Raise ``ParameterError`` for the first knob in ``values`` that breaks its rule.

    Every knob in ``values`` must have a rule and every rule a knob, so a knob cannot be
    added to a chapter without saying what it accepts.
    """
    if set(values) != set(rules):
        missing = sorted(set(values) ^ set(rules))
        raise ParameterError(f"check_parameters: knobs and rules differ: {missing}")
    for name, rule in rules.items():
        value = values[name]
        why = rule.why(value)
        if why is not None:
            raise ParameterError(f"{name}={value!r} {why}" if why.startswith("must be")
                                 else f"{name}={value!r}: {why}")
