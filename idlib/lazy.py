"""torch, imported when it is first used: what never measures never pays for it.

``import torch`` costs about 1.5 s of CPU time, fifty times a bare interpreter's start, and a
closed-form count, the census, ``--help`` and every refusal of bad input need none of it.  So
no idlib module imports torch itself: each one says ``from .lazy import torch`` (tests/
test_layering.py checks it) and gets :data:`torch`, a stand-in whose first attribute read
(``torch.zeros``, ``torch.Tensor``, ...) imports the real module; every attribute is then kept
on the stand-in, so later reads cost what a module's do.  Consequences:

* no idlib module may use torch while it is imported (module level: no ``torch.float64``
  constants, no ``torch.nn.Module`` base classes, no tensor defaults); the few that need one
  build it on first use (``idlib.implementations.modules``);
* an attribute is read from torch once: patch torch's submodules (``torch.linalg.svd``), not
  torch's own attributes, in a test;
* :func:`is_tensor` asks whether a value is a tensor without importing torch (no tensor can
  exist before torch is imported).
"""
from __future__ import annotations

import importlib
import sys
from typing import Any


class LazyModule:
    """A module imported on the first read of one of its attributes (then kept, attribute by
    attribute, on this object)."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_lazy_name", name)

    def __getattr__(self, attr: str) -> Any:            # only for attributes not yet kept
        if attr.startswith("__") and attr.endswith("__") and attr not in ("__version__", "__file__"):
            raise AttributeError(attr)       # what copy, pickle, inspect ask of an object: not torch
        value = getattr(importlib.import_module(self._lazy_name), attr)
        object.__setattr__(self, attr, value)
        return value

    def __setattr__(self, attr: str, value: Any) -> None:
        raise AttributeError(f"idlib.lazy: set {self._lazy_name}.{attr} on the module itself")

    def __repr__(self) -> str:
        state = "imported" if self._lazy_name in sys.modules else "not imported yet"
        return f"<lazy module {self._lazy_name!r} ({state})>"


torch = LazyModule("torch")


def is_tensor(x: Any) -> bool:
    """Whether ``x`` is a torch tensor, without importing torch."""
    module = sys.modules.get("torch")
    return module is not None and isinstance(x, module.Tensor)


def imported(name: str = "torch") -> bool:
    """Whether the module ``name`` has been imported in this process."""
    return name in sys.modules
