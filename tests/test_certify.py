"""idlib.certify: the rule (tolerance, rank, threshold, gap text) and the one Check record."""
import ast
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import idlib.rank
from idlib import AttentionConfig, count
from idlib.verdict import Check, check
from idlib.certify import (CERTIFY_GAP, CERTIFY_GAP_TEXT, format_gap, is_certified,
                           rank_from_singular_values, roundoff_tolerance)
from idlib.rank import SPREAD_QK_SCALE, measure_until_certified

EPS = torch.finfo(torch.float64).eps
IDLIB = Path(idlib.rank.__file__).parent


@dataclass(frozen=True)
class Fake:
    rank: int
    n_params: int
    gap: float
    certified: bool


def test_threshold_and_its_text():
    assert CERTIFY_GAP == 1e4 and CERTIFY_GAP_TEXT == "1e4"
    assert is_certified(1e4) and not is_certified(9999.999) and is_certified(math.inf)


def test_tolerance_and_rank_rule():
    assert roundoff_tolerance(3.0, (7, 40)) == 3.0 * 40 * EPS
    sv = torch.tensor([2.0, 1.0, 1e-5, 1e-20], dtype=torch.float64)
    r, gap = rank_from_singular_values(sv, (50, 4))
    assert r == 3 and gap == 1e-5 / (2.0 * 50 * EPS)
    # sigma_{r+1} above tau is what the gap divides by
    r, gap = rank_from_singular_values(torch.tensor([1.0, 1e-2, 1e-9], dtype=torch.float64), (3, 3))
    assert r == 3 and gap == 1e-9 / (3 * EPS)


def test_rank_rule_at_a_small_scale_at_rank_one_and_for_round_off_only():
    """tau follows sigma_1 (scale 0 by default, not 1): at sigma_1 = 1e-3 a value of 1e-17 is above
    tau; rank 1 takes the ordinary branch; a matrix that is round-off throughout (at scale 1) has
    rank 0 and gap tau / sigma_1."""
    r, gap = rank_from_singular_values(torch.tensor([1e-3, 1e-17], dtype=torch.float64), (2, 2))
    assert r == 2 and gap == 1e-17 / (1e-3 * 2 * EPS)
    r, gap = rank_from_singular_values(torch.tensor([1.0, 0.0], dtype=torch.float64), (2, 2))
    assert r == 1 and gap == 1.0 / (2 * EPS)
    r, gap = rank_from_singular_values(torch.tensor([1e-21, 1e-20], dtype=torch.float64), (2, 2), scale=1.0)
    assert r == 0 and gap == 2 * EPS / 1e-20


def test_format_gap_decades():
    assert [format_gap(g) for g in (math.inf, 1e8 * 1.01, 1e8, 12.0, 1e4, 0.0)] == \
        ["inf", "> 1e8", "1e8-1e9", "1e1-1e2", "1e4-1e5", "1e-99-1e-98"]


@pytest.mark.parametrize("rank, n_params, certified, agrees", [
    (48, 64, True, True),      # certified, equal totals, equal rank
    (47, 64, True, False),     # certified but another rank: a disagreement
    (48, 64, False, False),    # equal but not certified: no verdict
    (48, 65, True, False),     # totals differ
])
def test_check_agrees_only_when_certified_equal_and_same_total(rank, n_params, certified, agrees):
    c = Check(AttentionConfig(4, 2), 64, 48, Fake(rank, n_params, 1e9 if certified else 10.0, certified))
    assert c.agrees is agrees
    assert (c.unidentified, c.rank, c.measured_unidentified) == (16, rank, n_params - rank)


def test_check_pairs_the_closed_form_and_serialises():
    cfg = AttentionConfig(6, 2, bias="qkvo")
    closed = count(cfg)
    m = Fake(closed.identified, closed.total, 2e6, True)
    c = check(cfg, m, [{"seed": 3, "rank": m.rank}], label="row")
    assert (c.total, c.identified, c.unidentified) == (closed.total, closed.identified, closed.unidentified)
    assert c.agrees and c.seed == 3 and c.label == "row"
    d = c.as_dict()
    assert d["agrees"] is True and d["gap"] == 2e6 and d["measured_unidentified"] == closed.unidentified
    assert set(d) == {"config", "total", "identified", "unidentified", "rank", "n_params",
                      "measured_unidentified", "gap", "certified", "seed", "attempts", "agrees"}
    with pytest.raises(AttributeError):
        c.agrees = False          # computed once, frozen


def test_retry_loop_stops_at_first_certified_and_spreads_late(monkeypatch):
    cfg = AttentionConfig(4, 2)
    calls = []

    def fake(config, seed=0, params=None, **_):
        calls.append((seed, params is not None))
        ok = seed == 12
        return Fake(48, 64, 1e6 if ok else 10.0, ok)

    monkeypatch.setattr(idlib.rank, "measure", fake)
    m, attempts = measure_until_certified(cfg, seed=10, max_attempts=5, spread_from=1)
    assert m.certified and calls == [(10, False), (11, True), (12, True)]
    assert [a["qk_scale"] for a in attempts] == [1.0, SPREAD_QK_SCALE, SPREAD_QK_SCALE]
    calls.clear()
    m, attempts = measure_until_certified(cfg, seed=0, max_attempts=2)
    assert not m.certified and len(attempts) == 2 and calls == [(0, False), (1, False)]


def _imports(module: str) -> set[str]:
    tree = ast.parse((IDLIB / f"{module}.py").read_text())
    return {n.module.lstrip(".") for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | \
           {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module is None
            for a in n.names}


def test_no_circle_between_certify_rank_and_fastrank():
    assert not {"rank", "fastrank"} & _imports("certify")
    assert "rank" not in _imports("fastrank") and "certify" in _imports("fastrank")
    assert {"certify", "fastrank"} <= _imports("rank")


def test_format_gap_below_one_and_defaults_of_the_retry_loop():
    assert [format_gap(g) for g in (0.5, 0.01)] == ["1e-1-1e0", "1e-2-1e-1"]
    config = AttentionConfig(d_model=4, n_heads=2)
    m, attempts = measure_until_certified(config)           # defaults: seed 0, one attempt
    assert [a["seed"] for a in attempts] == [0] and attempts[0]["rank"] == m.rank
    assert attempts[0]["qk_scale"] == 1.0 and m.method == "dense"
    m, _ = measure_until_certified(AttentionConfig(d_model=24, n_heads=4), method="structured")
    assert m.method == "structured"                        # keyword arguments reach measure
