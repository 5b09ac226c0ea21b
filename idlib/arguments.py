"""What the public functions accept, declared once per argument and checked by one validator.

A public function declares each argument's rule (as scikit-learn's ``_param_validation``)::

    @accepts(config=LAYER, seed=SEED, params=PARAMS, frequencies=FREQUENCIES)
    def measure(config, seed=0, ...): ...

and a call that breaks one raises :class:`ConfigError` with one template,

    <function>: <argument>=<value> must be <rule>            (the kind is wrong)
    <function>: <argument>=<value> must be <rule>: <why>     (the kind is right, a size is not)

before any work.  A rule may read the other arguments (the layer fixes the shapes of
``params``, the number of ``frequencies``, the width of ``X``).  Each rule also says how to
break it (``Rule.bad``: values that must be refused, given a valid call's arguments), which is
how ``tests/test_arguments.py`` generates its invalid calls from these declarations.
"""
from __future__ import annotations

import functools
import inspect
import math
import numbers
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from .lazy import is_tensor, torch

from . import variants
from .config import AttentionConfig, LatentAttentionConfig
from .fields import MAX_SEED, MAX_SIZE, ConfigError, plain, show

Arguments = dict[str, Any]


@dataclass(frozen=True)
class Rule:
    """``check(value, arguments)``: None when the value is accepted, "" when its kind is wrong
    (the message is the rule), else what is wrong in its size.  ``bad(arguments)``: values that
    break the rule in a call whose other arguments are ``arguments``."""

    text: str
    check: Callable[[Any, Arguments], str | None]
    bad: Callable[[Arguments], list[Any]] = field(default=lambda a: [])


def accepts(**rules: Rule) -> Callable:
    """Check the named arguments of every call against their rules (see the module docstring)."""
    def wrap(fn: Callable) -> Callable:
        sig = inspect.signature(fn)
        unknown = set(rules) - set(sig.parameters)
        if unknown:
            raise TypeError(f"accepts: {fn.__name__} has no argument {sorted(unknown)}")

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError as e:
                raise ConfigError(f"{fn.__name__}: {e}") from None
            bound.apply_defaults()
            check(fn.__name__, rules, bound.arguments)
            return fn(*bound.args, **bound.kwargs)

        checked.rules = rules          # type: ignore[attr-defined]
        return checked
    return wrap


def check(function: str, rules: dict[str, Rule], arguments: Arguments) -> None:
    """Raise ConfigError for the first argument that breaks its rule (in declaration order)."""
    for name, rule in rules.items():
        value = arguments[name]
        why = rule.check(value, arguments)
        if why is not None:
            raise ConfigError(f"{function}: {name}={_short(value)} must be {rule.text}"
                              + (f": {why}" if why else ""))


def _short(value: Any) -> str:
    if is_tensor(value):
        return f"<tensor of shape {tuple(value.shape)}, {str(value.dtype).replace('torch.', '')}>"
    if isinstance(value, dict) and any(is_tensor(v) for v in value.values()):
        return "{" + ", ".join(f"{k!r}: {_short(v)}" for k, v in list(value.items())[:3]) + \
            (", ..." if len(value) > 3 else "") + "}"
    return show(value)


# -- scalars ------------------------------------------------------------------------------------

def _is_int(x: Any) -> bool:
    return isinstance(plain(x), int) and not isinstance(plain(x), bool)


def integer(low: int, high: int, none: bool = False) -> Rule:
    """An integer in [low, high] (None too, with ``none``)."""
    text = f"an integer in [{low}, {high}]" + (" or None" if none else "")

    def ok(x: Any, a: Arguments) -> str | None:
        if x is None and none:
            return None
        return None if _is_int(x) and low <= plain(x) <= high else ""
    return Rule(text, ok, lambda a: [low - 1, 0.5, True, "1", None if not none else 1.5, high + 1])


def real(low: float, high: float, open_low: bool = False) -> Rule:
    """A finite real number in [low, high] ((low, high] with ``open_low``)."""
    text = f"a finite number in {'(' if open_low else '['}{low:g}, {high:g}]"

    def ok(x: Any, a: Arguments) -> str | None:
        x = plain(x)
        if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x):
            return ""
        return None if (low < x if open_low else low <= x) and x <= high else ""
    return Rule(text, ok, lambda a: [math.nan, math.inf, "1", None, 1j, low - 1 if math.isfinite(low) else math.nan])


def one_of(*choices: Any) -> Rule:
    """One of ``choices`` (compared exactly)."""
    return Rule("one of " + ", ".join(repr(c) for c in choices),
                lambda x, a: None if isinstance(x, str) and x in choices else "",
                lambda a: ["bogus", None, 1, str(choices[0]).upper()])


def available_memory() -> int:
    """Bytes of memory available now (MemAvailable; the physical memory where that is unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


SEED = integer(0, MAX_SEED)
SIZE = integer(1, MAX_SIZE)
OPTIONAL_SIZE = integer(1, MAX_SIZE, none=True)
NONNEGATIVE = integer(0, MAX_SIZE)
TOLERANCE = real(0.0, 1.0, open_low=True)


# -- the layer and what it fixes ------------------------------------------------------------------

def _layer(kinds: tuple[type, ...], text: str) -> Rule:
    return Rule(text, lambda x, a: None if isinstance(x, kinds) else "",
                lambda a: [None, {"d_model": 8, "n_heads": 2}, "AttentionConfig(d_model=8)", 8])


LAYER = _layer((AttentionConfig,), "an AttentionConfig")
ANY_LAYER = _layer((AttentionConfig, LatentAttentionConfig),
                   "an AttentionConfig or a LatentAttentionConfig")


def _planes(config: Any) -> int | None:
    if isinstance(config, AttentionConfig):
        return config.rotary_dim // 2
    if isinstance(config, LatentAttentionConfig):
        return config.rope_dim // 2
    return None


def _real_vector(x: Any) -> torch.Tensor | list[float] | None:
    """``x`` as a 1-D tensor or a list of floats when it is a tensor or a sequence of finite real
    numbers (a sequence is read without torch)."""
    if isinstance(x, (str, bytes, dict, set)) or x is None:
        return None
    if is_tensor(x):
        if x.dtype.is_complex or x.dtype == torch.bool:
            return None
        return x if x.ndim == 1 and bool(torch.isfinite(x).all()) else None
    try:
        items = list(x)
    except TypeError:
        return None
    if not all(isinstance(plain(v), numbers.Real) and not isinstance(plain(v), bool) for v in items):
        return None
    values = [float(plain(v)) for v in items]
    return values if all(map(math.isfinite, values)) else None


def _angles(layer_sized: bool) -> Callable[[Any, Arguments], str | None]:
    def ok(x: Any, a: Arguments) -> str | None:
        if x is None and layer_sized:              # the layer's standard schedule
            return None
        t = _real_vector(x)
        if t is None:
            return ""
        planes = _planes(a.get("config")) if layer_sized else None
        if planes is not None and len(t) != planes:
            return (f"{len(t)} given, the layer has rotary_dim / 2 = {planes} rotation planes "
                    "(one angle each)")
        return None
    return ok


def _bad_angles(a: Arguments) -> list[Any]:
    return ["0.1", {"a": 0.1}, [1j], [[0.1, 0.2]], torch.zeros(2, 2, dtype=torch.float64),
            [math.nan], [True], torch.tensor([1j])]


ANGLES = Rule("a 1-D sequence or tensor of finite real angles", _angles(False), _bad_angles)
FREQUENCIES = Rule("None or a 1-D sequence or tensor of finite real angles, one per rotation plane",
                   _angles(True),
                   lambda a: _bad_angles(a) + [[0.1] * ((_planes(a.get("config")) or 0) + 1)])


def _params(optional: bool) -> Callable[[Any, Arguments], str | None]:
    def ok(x: Any, a: Arguments) -> str | None:
        if x is None and optional:                   # the seeded generic point
            return None
        if not isinstance(x, dict) or not all(is_tensor(v) for v in x.values()):
            return ""
        config = a.get("config")
        if not isinstance(config, AttentionConfig):
            return None
        shapes = variants.shapes(config)
        missing, extra = sorted(set(shapes) - set(x)), sorted(set(x) - set(shapes))
        if missing or extra:
            return ("the layer's are " + ", ".join(shapes)
                    + (f" (missing {', '.join(missing)})" if missing else "")
                    + (f" (not the layer's: {', '.join(extra)})" if extra else ""))
        for name, shape in shapes.items():
            t = x[name]
            if tuple(t.shape) != tuple(shape):
                return f"{name} has shape {tuple(t.shape)}, the layer's is {tuple(shape)}"
            if t.dtype != torch.float64:
                return (f"{name} is {str(t.dtype).replace('torch.', '')}; identifiability "
                        "numerics are float64")
        return None
    return ok


def _bad_params(a: Arguments) -> list[Any]:
    config = a.get("config")
    if not isinstance(config, AttentionConfig):
        return [{}]
    shapes = variants.shapes(config)
    good = {k: torch.zeros(s, dtype=torch.float64) for k, s in shapes.items()}
    first = next(iter(shapes))
    return [{}, "params", {**good, "extra": torch.zeros(1, dtype=torch.float64)},
            {**good, first: torch.zeros(*shapes[first], 1, dtype=torch.float64)},
            {**good, first: good[first].float()}, {k: v.tolist() for k, v in good.items()}]


PARAMS = Rule("a dict of the layer's parameters (float64 tensors, as param_shapes says)",
              _params(False), _bad_params)
OPTIONAL_PARAMS = Rule("None or a dict of the layer's parameters (float64 tensors, as "
                       "param_shapes says)", _params(True), _bad_params)


def _theta(x: Any, a: Arguments) -> str | None:
    if not is_tensor(x) or x.ndim != 1 or x.dtype.is_complex:
        return ""
    config = a.get("config")
    if isinstance(config, AttentionConfig):
        P = sum(math.prod(s) for s in variants.shapes(config).values())
        if x.numel() != P:
            return f"it has {x.numel()} entries, the layer has {P} parameters"
    return None


THETA = Rule("a 1-D tensor of the layer's parameters (flattened)", _theta,
             lambda a: [None, [0.0], torch.zeros(2, 2), torch.zeros(1)])


def _inputs(x: Any, a: Arguments) -> str | None:
    if not is_tensor(x) or x.dtype.is_complex:
        return ""
    config = a.get("config")
    d = getattr(config, "d_model", None)
    if x.ndim != 3:
        return f"it has {x.ndim} dimensions, inputs are (sequences, tokens, d_model)"
    if d is not None and x.shape[-1] != d:
        return f"its last dimension is {x.shape[-1]}, the layer's width is d_model={d}"
    if x.dtype != torch.float64:
        return f"it is {str(x.dtype).replace('torch.', '')}, identifiability numerics are float64"
    if x.shape[1] < 1:
        return "it has no tokens"
    return None


def _bad_inputs(a: Arguments) -> list[Any]:
    d = getattr(a.get("config"), "d_model", 4)
    return [None, [[0.0] * d], torch.zeros(3, d, dtype=torch.float64),
            torch.zeros(1, 3, d + 1, dtype=torch.float64), torch.zeros(1, 3, d, dtype=torch.float32)]


INPUTS = Rule("a float64 tensor of shape (sequences, tokens, d_model)", _inputs, _bad_inputs)


def permutation_of(length: Callable[[Arguments], int], what: str) -> Rule:
    """A list holding each of 0 .. length - 1 once."""
    def ok(x: Any, a: Arguments) -> str | None:
        if not isinstance(x, (list, tuple)) or not all(_is_int(i) for i in x):
            return ""
        n = length(a)
        return None if sorted(plain(i) for i in x) == list(range(n)) else \
            f"it must hold each of 0 .. {n - 1} ({what}) exactly once"
    return Rule(f"a permutation of the {what}", ok,
                lambda a: [None, "01", [0] * length(a), list(range(length(a) + 1)), [0.5]])


HEAD_PERMUTATION = permutation_of(lambda a: getattr(a.get("config"), "n_heads", 0), "query heads")


def _device(x: Any, a: Arguments) -> str | None:
    if x is None:
        return None
    if not isinstance(x, (str, torch.device)):
        return ""
    try:
        device = torch.device(x)
    except (RuntimeError, ValueError):
        return ""
    if device.type == "cpu":
        return None
    if device.type != "cuda":
        return ""
    return cuda_problem(device)


def cuda_problem(device: torch.device) -> str | None:
    """Why a cuda device cannot measure here (None when it can): no GPU, or no GPU of its index."""
    if not torch.cuda.is_available():
        return "no CUDA device is available here"
    if device.index is not None and device.index >= torch.cuda.device_count():
        return f"there are {torch.cuda.device_count()} CUDA devices"
    return None


DEVICE = Rule("None, 'cpu' or 'cuda' (cuda:0, cuda:1, ...) or such a torch.device", _device,
              lambda a: ["gpu", 1, "cuda:99", "meta"])
