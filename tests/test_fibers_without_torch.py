"""idlib.fibers counts the RoPE rotation classes in plain Python (math's sin, cos, atan2 and pow),
so that a count never imports torch (idlib.lazy).  Until then the classes were computed on torch
tensors; that computation is kept below, verbatim, as the reference, and the two must give the
same classes: on drawn angles (hypothesis, seeded), on the standard schedule of every base the
book and the census use, and on the edge cases (a base below 1, crowded and huge widths, partial
RoPE, explicit frequencies, angles at 0 and pi and past 2 pi, ties, chains).

The two differ in one respect only: torch's pow, sin and cos are vectorised (SLEEF, within one
unit in the last place) and the C library's are not, so an angle may differ in its last bit.  The
classes differ only where an angle, or the gap between two, lies within that last bit of the
tolerance DELTA: a tie that the tolerance decides, not the layer (tests/test_counting.py's
OFF_GRID).  No such tie occurs on the schedules checked here but one, a base below 1 over 2**22
planes, where the angles wrap up to 1e6 and their last bit is a tenth of the tolerance: there
the former count depended on the CPU's vector unit, and the count now is the one torch gives
with its scalar kernels, the C library's (test_the_classes_are_torchs_with_its_scalar_kernels).
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings, strategies as st

from idlib import fibers
from idlib.config import AttentionConfig
from idlib.counting import count
from idlib.fibers import (CLOSED_FORM_PLANES, ROTATION_TOL, _delta, _standard_classes, layer_classes,
                          rope_frequencies, rotation_classes, standard_frequencies)

PROPERTY = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


# -- the reference: idlib.fibers._group as it was on torch tensors (a186888) ----------------------

def reference_group(frequencies, tol: float) -> tuple[list[int], int, int]:
    theta = torch.as_tensor(frequencies, dtype=torch.float64).reshape(-1)
    if not bool(torch.isfinite(theta).all()):
        raise ValueError("frequencies must be finite numbers")
    phi = torch.atan2(torch.sin(theta).abs(), torch.cos(theta))          # in [0, pi]
    delta = _delta(tol)
    plus, minus = phi < delta, (math.pi - phi) < delta
    rest = (~plus & ~minus).nonzero().reshape(-1)
    vals, order = phi[rest].sort(descending=True, stable=True)
    n = vals.numel()
    label = torch.zeros(n, dtype=torch.long)
    if n:
        gaps = vals[:-1] - vals[1:]                         # >= 0
        new = torch.cat([torch.tensor([True]), gaps >= delta])
        label = new.cumsum(0) - 1                           # runs joined by gaps < delta ...
        runs = torch.bincount(label)
        if bool((runs > 1).any()):                          # ... split at DELTA from their head
            asc = (-vals).contiguous()                      # (only the runs of two or more: a
            split, c = label.clone(), int(runs.numel())     # Python loop over their classes)
            for start in (new & (runs[label] > 1)).nonzero().reshape(-1).tolist():
                i, end = start, start + int(runs[label[start]])
                while i < end:
                    j = min(end, int(torch.searchsorted(asc, asc[i] + delta, side="left")))
                    split[i:j] = c
                    i, c = max(j, i + 1), c + 1
            label = torch.unique(split, return_inverse=True)[1]
    first = torch.full((int(label.max()) + 1 if n else 0,), len(phi), dtype=torch.long)
    first = first.scatter_reduce(0, label, rest[order], reduce="amin") if n else first
    mults = torch.bincount(label, minlength=first.numel()) if n else torch.zeros(0, dtype=torch.long)
    return mults[torch.argsort(first, stable=True)].tolist(), int(plus.sum()), int(minus.sum())


def reference_classes(config: AttentionConfig, frequencies=None):
    """idlib.fibers.layer_classes as it was: torch's frequencies where it tabulates."""
    r, k = config.rotary_dim, config.head_dim
    if frequencies is None and r // 2 > CLOSED_FORM_PLANES and config.rope_base >= 1.0:
        mults, plus, minus = _standard_classes(r // 2, config.rope_base)
        return mults, plus + k - r, minus
    f = rope_frequencies(config) if frequencies is None else frequencies
    mults, plus, minus = reference_group(f, ROTATION_TOL)
    return Counter(mults), k - r + 2 * plus, 2 * minus


def rope_layer(planes: int, base: float, head_dim: int | None = None) -> AttentionConfig:
    k = head_dim or 2 * planes
    return AttentionConfig(d_model=k, n_heads=1, rope_fraction=2 * planes / k, rope_base=base)


# -- drawn angles ---------------------------------------------------------------------------------

ANGLE = st.floats(-1e3, 1e3, allow_nan=False) | st.floats(-1e-6, 1e-6) | \
    st.sampled_from([0.0, -0.0, math.pi, -math.pi, 2 * math.pi, 1e-9, 1e-9 * (1 + 2 ** -40), 1e300,
                     math.pi - 1e-9, math.nextafter(math.pi, 0), 5e-324])


@st.composite
def crowded(draw) -> list[float]:
    """Angles near a few centres, spaced by multiples of DELTA / 10: chains, ties, splits."""
    delta = _delta(ROTATION_TOL)
    centres = draw(st.lists(st.floats(0.0, 7.0), min_size=1, max_size=3))
    steps = draw(st.lists(st.integers(-30, 30), min_size=1, max_size=40))
    return [centres[i % len(centres)] + s * delta / 10 for i, s in enumerate(steps)]


@PROPERTY
@given(angles=st.lists(ANGLE, max_size=60) | crowded(), pass_dims=st.integers(0, 5))
@example(angles=[0.5, 0.3, 0.3, 0.5, 0.5, 0.9], pass_dims=0)
@example(angles=[1.0, 1.0 + 2 * math.pi, -1.0, math.pi, 0.0], pass_dims=1)
@example(angles=[1.0 + i * 0.6 * _delta(ROTATION_TOL) for i in range(5)], pass_dims=0)
@example(angles=[], pass_dims=3)
@example(angles=[2 * _delta(ROTATION_TOL), _delta(ROTATION_TOL)], pass_dims=0)   # a gap of DELTA
@example(angles=[3.0, 3.0 - 2 * _delta(ROTATION_TOL), 3.0 - _delta(ROTATION_TOL)], pass_dims=0)
def test_drawn_angles_give_the_reference_classes(angles, pass_dims):
    mults, plus, minus = reference_group(angles, ROTATION_TOL)
    assert rotation_classes(angles, pass_dims) == (mults, pass_dims + 2 * plus, 2 * minus)


@PROPERTY
@given(angles=crowded(), tol=st.sampled_from([1e-12, 1e-9, 1e-6, 1e-3, 0.1, 1.0]))
def test_other_tolerances_give_the_reference_classes(angles, tol):
    mults, plus, minus = reference_group(angles, tol)
    assert rotation_classes(angles, 0, tol) == (mults, 2 * plus, 2 * minus)


def test_a_gap_of_exactly_delta_separates_two_classes():
    delta = _delta(ROTATION_TOL)
    assert 2 * delta - delta == delta                       # exact (Sterbenz)
    assert rotation_classes([2 * delta, delta], 0) == ([1, 1], 0, 0)
    assert rotation_classes([2 * delta, math.nextafter(delta, 1.0)], 0) == ([2], 0, 0)
    assert rotation_classes([math.nextafter(delta, 0.0)], 0) == ([], 2, 0)      # at +1


def test_tensors_arrays_and_sequences_of_angles_are_the_same_angles():
    angles = [0.25, 0.5, 0.25, 3.0, 0.0]
    expected = rotation_classes(angles, 0)
    assert expected == ([2, 1, 1], 2, 0)
    for form in (tuple(angles), np.array(angles), np.array(angles, dtype=np.float32).astype(float),
                 torch.tensor(angles, dtype=torch.float64), torch.tensor(angles, dtype=torch.float32),
                 [np.float64(a) for a in angles], [torch.tensor(a) for a in angles]):
        assert rotation_classes(form, 0) == expected, type(form)
    assert rotation_classes(torch.tensor([[0.25, 0.5], [0.25, 3.0]]), 0) == ([2, 1, 1], 0, 0)
    assert rotation_classes([1, 2, True], 0) == ([2, 1], 0, 0)        # integers and booleans too
    with pytest.raises(ValueError, match="frequencies must be finite numbers"):
        rotation_classes([0.1, math.inf], 0)
    with pytest.raises(ValueError, match="frequencies must be finite real numbers"):
        rotation_classes(["0.1"], 0)


# -- the standard schedule ------------------------------------------------------------------------

BASES = [1.0, 2.0, 10.0, 100.0, 500.0, 1e4, 1e5, 5e5, 1e6, 1e7, 8e6, 1e8, 1e9, 1e10, 1e12, 1e20,
         3.3, 12345.678, 37684417.464558154]          # round ones: the families' defaults
BELOW_ONE = [0.999, 0.5, 0.1, 1e-3, 1e-9, 1e-300]


@pytest.mark.parametrize("base", BASES + BELOW_ONE)
def test_the_standard_schedule_gives_the_reference_classes(base):
    """Every width up to 128 planes, then a spread of widths up to the closed form's threshold."""
    widths = list(range(0, 129)) + [191, 256, 500, 512, 777, 1000, 1024, 2048, 2895, 4000, 4096]
    for planes in widths:
        config = rope_layer(planes, base) if planes else AttentionConfig(d_model=4, n_heads=1)
        assert layer_classes(config) == reference_classes(config), (planes, base)


def test_partial_rope_and_explicit_frequencies_give_the_reference_classes():
    for planes, k in [(1, 4), (3, 8), (16, 64), (32, 80)]:
        config = rope_layer(planes, 1e4, head_dim=k)
        assert layer_classes(config) == reference_classes(config)
        assert layer_classes(config)[1] == k - 2 * planes
        explicit = [0.1, 0.1, 2 * math.pi, math.pi][:planes] + [0.2] * max(0, planes - 4)
        assert layer_classes(config, explicit) == reference_classes(config, explicit)
        tensor = torch.linspace(0.0, 7.0, planes, dtype=torch.float64)
        assert layer_classes(config, tensor) == reference_classes(config, tensor)


def test_the_schedule_is_the_same_expression_as_the_tensors():
    """standard_frequencies computes torch's expression in floats: equal but for the last bit."""
    for planes, base in [(64, 1e4), (4096, 5e5), (1000, 0.5), (3, 1e-300)]:
        config = rope_layer(planes, base)
        ours = standard_frequencies(config)
        theirs = rope_frequencies(config).tolist()
        assert len(ours) == len(theirs) == planes
        assert all(a == b or abs(a - b) <= math.ulp(b) for a, b in zip(ours, theirs))


def test_the_classes_are_torchs_with_its_scalar_kernels_bit_for_bit():
    """Where the last bit matters: a base below 1 wraps the angles up to 1 / base, and at 1e6 one
    unit in the last place is 1.2e-10 rad, within a tenth of the tolerance.  torch's vectorised
    kernels (SLEEF; AVX2 here) round pow differently from the C library in about 1.5% of the
    angles, and with 2**22 planes at base 1e-6 that moved one pair across the tolerance: the
    former count depended on the CPU's vector unit.  With the vectorised kernels off
    (ATEN_CPU_CAPABILITY=default) torch's pow is the C library's: the schedule is equal bit for
    bit, and the former torch computation gives the classes counted here, on that layer too."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import torch\n"
        "from test_fibers_without_torch import reference_classes, rope_layer\n"
        "from idlib.fibers import layer_classes, rope_frequencies, standard_frequencies\n"
        "assert torch.backends.cpu.get_cpu_capability() == 'DEFAULT'\n"
        "for planes, base in [(64, 1e4), (4096, 5e5), (50000, 0.5), (10000, 1e-300)]:\n"
        "    config = rope_layer(planes, base)\n"
        "    assert standard_frequencies(config) == rope_frequencies(config).tolist()\n"
        "config = rope_layer(1 << 22, 1e-6)\n"
        "print(standard_frequencies(config) == rope_frequencies(config).tolist(),\n"
        "      layer_classes(config) == reference_classes(config))\n")
    run = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent)],
                         env={**os.environ, "ATEN_CPU_CAPABILITY": "default"},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "True"]


def test_a_subnormal_base_overflows_to_a_refusal_as_before():
    config = rope_layer(1000, 5e-324)                 # 5e-324 ** -0.999 > the largest float
    assert standard_frequencies(config)[-1] == math.inf
    with pytest.raises(ValueError, match="frequencies must be finite numbers"):
        layer_classes(config)
    with pytest.raises(ValueError, match="frequencies must be finite numbers"):
        reference_classes(config)


def test_huge_widths_below_one_count_the_same_as_before():
    """A base below 1 tabulates every plane (angles above 1 wrap around 2 pi)."""
    for planes, base in [(40_000, 0.5), (50_000, 0.999), (30_000, 1e-3)]:
        config = rope_layer(planes, base)
        assert layer_classes(config) == reference_classes(config), (planes, base)


def test_the_closed_form_is_unchanged_beyond_the_threshold():
    """Above CLOSED_FORM_PLANES (base >= 1) the closed form counts, as before; the counts of the
    book's largest layers do not depend on the tabulation."""
    for planes, base in [(CLOSED_FORM_PLANES + 1, 1e4), (1 << 20, 5e5), (1 << 24, 1e4)]:
        config = rope_layer(planes, base)
        assert layer_classes(config) == reference_classes(config)
    c = count(AttentionConfig(d_model=4096, n_heads=32, n_kv_heads=8, rope_fraction=1.0))
    assert (c.total, c.unidentified) == (41943040, 132096)


def test_counting_needs_no_tensor(monkeypatch):
    """The classes are computed without torch: every attribute read of idlib's torch fails."""
    class NoTorch:
        def __getattr__(self, name):
            raise AssertionError(f"torch.{name} read while counting")
    monkeypatch.setattr(fibers, "torch", NoTorch())
    for planes, base in [(64, 1e4), (5000, 5e5), (300, 0.5)]:
        config = rope_layer(planes, base)
        assert sum(m * n for m, n in layer_classes(config)[0].items()) <= planes
    assert rotation_classes([0.1, 0.1, 0.3], 0) == ([2, 1], 0, 0)
