"""idlib: identification of attention parameters, by closed form and by measured Jacobian rank.

Layers (a module imports only its own layer and those below; tests/test_layering.py checks it,
with no import circle and no idlib import inside a function):

    core     config, hf, attention, counting, certify, rank, fastrank, symmetry, conservation,
             implementations (and this package)
    report   idlib.report: tables and figures of the core's records
    studies  idlib.studies: one chapter's machinery (may use report's formatters)
    cli      idlib.cli (the ``idlib`` command, ``python -m idlib``)

No module imports torch itself: each takes ``torch`` from :mod:`idlib.lazy`, which imports it
on first use, so ``import idlib`` (any module of it) costs no torch import, and neither does a
count, the census, ``--help`` or a refusal of bad input; the first measurement pays it.  The
names below are imported eagerly: without torch that is a few hundredths of a second (the
whole CLI: tests/test_startup.py).
"""
from .config import AttentionConfig, ConfigError
from .attention import forward, init_params, n_params, param_shapes, random_inputs
from .counting import Count, count
from .rank import RankMeasurement, measure

__all__ = ["AttentionConfig", "ConfigError", "forward", "init_params", "n_params",
           "param_shapes", "random_inputs", "Count", "count", "RankMeasurement", "measure"]
