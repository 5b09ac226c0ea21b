"""idlib.studies.sweep: the random configurations span every field; a small sweep agrees everywhere."""
import math

import pytest

from idlib.attention import n_params
from idlib.config import AttentionConfig
from idlib.studies.sweep import (BIAS_SUBSETS, coverage, measure_until_certified, run_sweep,
                                 spread_params, sweep_configs, tally, width_mode)
from idlib.attention import init_params

# the appendix's default profile
DEFAULT = dict(n=240, seed=0, max_d=24, max_params=400, n_wide=12, max_params_wide=700)


@pytest.fixture(scope="module")
def default_configs():
    return sweep_configs(**DEFAULT)


def test_distinct_valid_and_within_limits(default_configs):
    cs = default_configs
    assert len(cs) == 240 == len(set(cs))
    assert all(isinstance(c, AttentionConfig) for c in cs)
    assert all(AttentionConfig(**c.to_dict()) == c for c in cs)            # re-validates
    assert max(c.d_model for c in cs) == 24 and min(c.d_model for c in cs) >= 1
    wide = [c for c in cs if c.d_model == 24]
    assert len(wide) >= 12
    assert all(n_params(c) <= 700 for c in wide)
    assert all(n_params(c) <= 400 for c in cs if c.d_model < 24)


def test_reproducible_and_seeded(default_configs):
    assert sweep_configs(**DEFAULT) == default_configs
    assert sweep_configs(**{**DEFAULT, "seed": 1}) != default_configs


def test_spans_every_field(default_configs):
    cov = coverage(default_configs)
    assert set(cov["bias"]) == {b or "none" for b in BIAS_SUBSETS}          # all 16 subsets
    assert min(cov["bias"].values()) == 15                                  # evenly: 240 / 16
    assert set(cov["causal"]) == {True, False}
    assert set(cov["group_size"]) == {"MHA (G = H)", "GQA", "MQA (G = 1)"}
    assert min(cov["group_size"].values()) >= 20
    assert set(cov["head_dim"]) == {"below", "at", "above", "wider"}
    assert min(cov["head_dim"].values()) >= 15
    assert sum(n for k, n in cov["value_dim"].items() if "!= k" in k) >= 40
    assert {"wider", "wider, != k"} & set(cov["value_dim"])
    assert set(cov["rope"]) == {"none", "full", "partial"} and min(cov["rope"].values()) >= 20
    assert set(cov["rope_base"]) == {"1", "100", "10000", "500000"}
    assert set(cov["n_heads"]) >= {1, 2, 3, 4, 5, 6, 8}
    cs = default_configs
    assert any(c.rotary_dim and c.has_bias("k") for c in cs)
    assert any(c.rotary_dim and c.n_kv_heads < c.n_heads for c in cs)


def test_width_mode():
    c = AttentionConfig(d_model=8, n_heads=2, head_dim=3, value_dim=9)
    assert (width_mode(c, 3), width_mode(c, 4), width_mode(c, 6), width_mode(c, 9)) == \
        ("below", "at", "above", "wider")


def test_small_sweep_agrees():
    cs = sweep_configs(12, seed=5, max_d=8, max_params=200, n_wide=2)
    rows = run_sweep(cs, seed=0)
    s = tally(rows)
    assert (s["n"], s["agree"], s["certified"], s["distinct"]) == (12, 12, 12, 12)
    assert s["disagreements"] == [] and s["min_gap"] >= 1e6 and s["max_d"] == 8
    for r in rows:
        assert r["rank"] == r["identified"] and r["n_params"] == r["total"]
        assert r["measured_unidentified"] == r["unidentified"]


def test_tally_reports_a_disagreement():
    c = AttentionConfig(d_model=4, n_heads=2)
    rows = [{"config": c, "total": 64, "identified": 48, "unidentified": 16, "rank": 47,
             "n_params": 64, "measured_unidentified": 17, "gap": math.inf, "certified": True,
             "agrees": False}]
    s = tally(rows)
    assert s["agree"] == 0 and s["disagreements"] == rows


def test_sweep_configs_gives_up_when_impossible():
    with pytest.raises(RuntimeError, match="found only"):
        sweep_configs(50, seed=0, max_d=1, max_params=8, n_wide=0, max_tries=2000)


def test_tally_separates_uncertified_from_disagreeing():
    c = AttentionConfig(d_model=4, n_heads=2)
    row = {"config": c, "total": 64, "identified": 48, "unidentified": 16, "rank": 47,
           "n_params": 64, "measured_unidentified": 17, "gap": 10.0, "certified": False,
           "agrees": False}
    s = tally([row])
    assert s["not_certified"] == [row] and s["disagreements"] == [] and s["agree"] == 0


def test_spread_params_doubles_query_and_key_weights_only():
    c = AttentionConfig(d_model=4, n_heads=2, bias="qkvo")
    p, q = init_params(c, 3), spread_params(c, 3)
    assert all((q[k] == 2 * p[k]).all() for k in ("W_Q", "W_K"))
    assert all((q[k] == p[k]).all() for k in p if k not in ("W_Q", "W_K"))
    latent = AttentionConfig(d_model=6, n_heads=2, kv_latent=4)     # keys come through W_UK
    p, q = init_params(latent, 3), spread_params(latent, 3)
    assert all((q[k] == 2 * p[k]).all() for k in ("W_Q", "W_UK"))
    assert all((q[k] == p[k]).all() for k in p if k not in ("W_Q", "W_UK"))


def test_retries_stop_at_the_first_certified_attempt():
    c = AttentionConfig(d_model=1, n_heads=8, n_kv_heads=2, head_dim=1, bias="kvo", causal=True)
    m, attempts = measure_until_certified(c, seed=0, max_attempts=12, spread_from=6)
    assert m.certified and m.rank == 17 and attempts[-1]["certified"]
    assert not any(a["certified"] for a in attempts[:-1])
    assert [a["seed"] for a in attempts] == list(range(len(attempts)))
    assert all(a["qk_scale"] == (2.0 if i >= 6 else 1.0) for i, a in enumerate(attempts))
    m, attempts = measure_until_certified(AttentionConfig(d_model=4, n_heads=2), max_attempts=5)
    assert len(attempts) == 1 and m.certified                       # a healthy layer: one try
