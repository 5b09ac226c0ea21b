"""Table cells for configurations measured at several seeds (``idlib.studies.rope.SeedRun``).

A chapter measures each configuration at every seed of its ``n_seeds`` knob and shows one row
per configuration: the closed form once, the measured ranks as the distinct values over the
seeds (one number when every seed agrees), the smallest gap, and "yes" only when every
seed's rank is certified. ``runs_summary`` says in one line how many agree at every seed.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

from ..certify import CERTIFY_GAP_TEXT, format_gap
from .prose import seeds_text
from .tables import format_certified, format_share

# Annotations name the measurement records of idlib.studies (SeedRun, BiasDifference, Step,
# Published) without importing them: report sits below studies and never imports it.

RUN_HEADERS = ("$P$", "$I$ (closed form)", "rank $J$", "gap $\\gamma$", "cert.", "$U/P$")


def distinct(values: Iterable[int]) -> str:
    """The distinct values, increasing, comma-separated: '72' or '71, 72'."""
    return ", ".join(str(v) for v in sorted(set(values)))


def ranks(run: SeedRun) -> str:
    """The distinct measured ranks of J over the seeds."""
    return distinct(c.rank for c in run.checks)


def run_cells(run: SeedRun) -> list[str]:
    """The cells of ``RUN_HEADERS`` for one configuration (U/P from the closed form)."""
    return [str(run.total), str(run.total - run.unidentified), ranks(run), format_gap(run.gap),
            format_certified(run.certified), format_share(run.unidentified, run.total)]


def runs_summary(runs: Sequence[SeedRun], seeds: Sequence[int]) -> str:
    """One line: configurations whose rank equals the closed form at every seed, and how many
    of all the measurements are certified, with the smallest gap."""
    n = len(runs)
    agree = sum(r.agrees for r in runs)
    checks = [c for r in runs for c in r.checks]
    certified = sum(c.certified for c in checks)
    finite = [c.gap for c in checks if not math.isinf(c.gap)]
    smallest = format_gap(min(finite)) if finite else "inf"
    return (f"{agree} of {n} configurations: measured rank = closed form at every seed "
            f"({seeds_text(seeds)}); {certified} of {len(checks)} measurements certified "
            f"(gap >= {CERTIFY_GAP_TEXT}); smallest gap {smallest}")
