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
build new ones. Integers are exact Python (or NumPy) integers, never bools.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Callable, Iterable

PROFILES = ("default", "full")


class ParameterError(ValueError):
    """A parameters-cell knob breaks its rule (the message names both)."""


@dataclass(frozen=True)
class Rule:
    """``holds(value)`` is True when the value is acceptable; ``text`` says the rule in words."""

    text: str
    holds: Callable[[Any], bool]


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
    return Rule(f"a list of at least {min_len} entries, each {rule.text}",
                lambda x: isinstance(x, (list, tuple)) and len(x) >= min_len
                and all(rule.holds(v) for v in x))


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
        if not rule.holds(value):
            raise ParameterError(f"{name}={value!r} must be {rule.text}")
