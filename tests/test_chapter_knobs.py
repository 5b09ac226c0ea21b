"""The knobs of chapters 4 (and its section), 6 and the appendix sweep: a profile fills only the
knobs the user did not pass, and every knob is checked in the cell after the parameters cell,
failing in one line that names it, before any work.

Each test runs a chapter's parameters cell, then the values papermill would inject, then the
checking cell, in a fresh namespace (no kernel): exactly what ``papermill -p NAME VALUE`` runs
first.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from idlib.report.parameters import ParameterError

CHAPTERS = Path(__file__).resolve().parents[1] / "chapters"


def first_cells(stem: str, **injected) -> dict:
    """The namespace after the parameters cell, the injected values and the checking cell."""
    cells = json.loads((CHAPTERS / f"{stem}.ipynb").read_text(encoding="utf-8"))["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    i = next(i for i, c in enumerate(code) if "parameters" in c["metadata"].get("tags", []))
    ns: dict = {}
    exec("".join(code[i]["source"]), ns)
    ns.update(injected)
    exec("".join(code[i + 1]["source"]), ns)
    return ns


def test_a_full_profile_never_overrides_a_knob_passed():
    with pytest.raises(ParameterError, match=r"^steps=-5 must be an integer in \[1, 100000\]$"):
        first_cells("06_training", profile="full", steps=-5)
    ns = first_cells("06_training", profile="full", steps=7)
    assert (ns["steps"], ns["n_seeds"]) == (7, 10)
    assert ns["rebalance_optimizers"] == ["sgd", "momentum", "adam", "adamw"]
    ns = first_cells("06_training")
    assert (ns["steps"], ns["n_seeds"], ns["teacher"]["d_model"]) == (120, 5, 8)


@pytest.mark.parametrize("knobs, message", [
    (dict(teacher=dict(d_model=8, n_heads=3)),
     r"^teacher=\{'d_model': 8, 'n_heads': 3\}: d_model=8 must be divisible by n_heads=3"),
    (dict(recall=dict(d_model=16, n_heads=4, qk_norm="plain")),
     r"^recall=.*: variant\(s\) qk_norm"),
    (dict(recall_keys=9), r"^recall_keys=9 must be an integer from 1 to d_model / 2 = 16 / 2"),
    (dict(recall_keys=4, recall_pairs=5), r"^recall_pairs=5 must be an integer from 1 to "
                                          r"recall_keys = 4$"),
    (dict(n_seeds=1), r"^n_seeds=1 must be an integer in \[2, 100\]$"),
    (dict(lr={"teacher-student": {"sgd": 0.1}}), r"^lr=.* must be \{task:"),
    (dict(rebalance_optimizers=["adam", "lion"]), r"^rebalance_optimizers=\['adam', 'lion'\] "
                                                 r"must be a list"),
    (dict(profile="Full"), r"^profile='Full' must be one of 'default', 'full'$"),
])
def test_training_knobs_fail_first_naming_the_knob(knobs, message):
    with pytest.raises(ParameterError, match=message):
        first_cells("06_training", **knobs)


@pytest.mark.parametrize("stem, knobs, message", [
    ("04_rope", dict(profile="full", d_model=6), r"^d_model=6 must be a multiple of 4"),
    ("04_rope", dict(fraction_heads=[1, 3]), r"^fraction_heads=\[1, 3\] must be a list .*"
                                             r"each a divisor of d_model=8$"),
    ("04_rope", dict(n_seeds=0), r"^n_seeds=0 must be an integer in \[1, 10\]$"),
    ("04_rope_measured", dict(d_model=7), r"^d_model=7 must be an even integer from 2 to 24$"),
    ("04_rope_measured", dict(bases=[10.0, 0]), r"^bases=\[10.0, 0\] must be a list"),
    ("04_rope_measured", dict(profile="full", seq_lens=[0]), r"^seq_lens=\[0\] must be"),
    ("appendix_sweep", dict(profile="full", n_configs=0), r"^n_configs=0 must be an integer"),
    ("appendix_sweep", dict(n_wide=300), r"^n_wide=300 must be an integer from 0 to "
                                         r"n_configs=240$"),
    ("appendix_sweep", dict(n_configs=30, max_d=1, max_params=6, n_wide=0),
     r"^n_configs=30, max_d=1, max_params=6, n_wide=0, max_params_wide=700: sweep_configs: "
     r"found only"),
])
def test_rope_and_sweep_knobs_fail_first_naming_the_knob(stem, knobs, message):
    with pytest.raises(ParameterError, match=message):
        first_cells(stem, **knobs)


@pytest.mark.parametrize("stem, profile, expected", [
    ("04_rope", "default", dict(d_model=8, fraction_heads=[1, 2], n_seeds=2)),
    ("04_rope", "full", dict(d_model=12, fraction_heads=[1, 2, 3], n_seeds=3)),
    ("04_rope_measured", "full", dict(d_model=12, seq_lens=[1, 2, 3, 4, 6], starved=[50, 200])),
    ("appendix_sweep", "full", dict(n_configs=800, max_params=1000, n_wide=40,
                                    max_params_wide=1600)),
])
def test_profiles_fill_the_knobs_left_none(stem, profile, expected):
    ns = first_cells(stem, profile=profile)
    assert {k: ns[k] for k in expected} == expected
    ns = first_cells(stem, profile=profile, seed=3)
    assert ns["seed"] == 3
