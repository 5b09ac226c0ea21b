"""idlib.rank's defaults and routing, and idlib.certify's rank rule, against their definitions."""
import math

import pytest
import torch

import idlib.blockrank as blockrank
import idlib.fastrank as fastrank
import idlib.rank as rank
from idlib.certify import rank_from_singular_values
from idlib.verdict import check
from idlib.config import MAX_SEED, MAX_SIZE, AttentionConfig, ConfigError
from idlib.counting import count
from idlib.rank import default_n_sequences, measure, measure_until_certified, softmax_budget


def test_softmax_budget_counts_free_scores():
    # per query: (keys seen - 1); n queries see n keys, or 1 .. n with a causal mask
    assert [softmax_budget(n, False) for n in (1, 2, 5)] == [0, 2, 20]
    assert [softmax_budget(n, True) for n in (1, 2, 5)] == [0, 1, 10]


def test_softmax_budget_is_an_integer():
    assert all(type(softmax_budget(n, causal)) is int for n in (1, 4, 7) for causal in (False, True))


def test_measure_draws_its_parameters_from_its_seed():
    """params=None means init_params(config, seed), with the inputs of the same seed; the structured
    route's lower bound on sigma_r is the first singular value, exactly (float64, not rounded)."""
    config = AttentionConfig(8, n_heads=2)
    m = measure(config, seed=3, method="structured")
    assert torch.equal(m.singular_values, measure(config, seed=3, params=rank.init_params(config, 3),
                                                  method="structured").singular_values)
    other = measure(config, seed=3, params=rank.init_params(config, 0), method="structured")
    assert not torch.equal(m.singular_values, other.singular_values)
    X = rank.random_inputs(config, default_n_sequences(config, rank.default_seq_len(config)),
                           rank.default_seq_len(config), 3)
    s = fastrank.structured_rank(config, rank.init_params(config, 3), X)
    assert m.singular_values.dtype == torch.float64
    assert m.singular_values[0].item() == s.sigma_r_lower


@pytest.mark.parametrize("kw,n,want", [
    # rows B n d >= P dominates: P = 512, 512 / (10 * 8) = 6.4 -> ceil(9.6) + 1
    (dict(d_model=8, n_heads=2, head_dim=8, value_dim=8), 10, 11),
    # one head: 2 d (k + v) / (n min(v, d)) = 2 * 8 * 5 / 10 = 8 -> ceil(12) + 1
    (dict(d_model=8, n_heads=2, head_dim=4, value_dim=1), 10, 13),
    # softmax budget: (H + G) d k / (H * 1) = 6 * 8 * 2 / 4 = 24 -> ceil(36) + 1 (n = 2, causal)
    (dict(d_model=8, n_heads=4, n_kv_heads=2, causal=True), 2, 37),
    # one token: no free score (budget 0), rows P / d = 32 -> ceil(48) + 1
    (dict(d_model=8, n_heads=2), 1, 49),
])
def test_default_n_sequences_is_the_largest_bound(kw, n, want):
    assert default_n_sequences(AttentionConfig(**kw), n) == want


def test_default_n_sequences_oversample():
    config = AttentionConfig(d_model=8, n_heads=2, head_dim=8, value_dim=8)
    assert default_n_sequences(config, 10, oversample=1.0) == math.ceil(6.4) + 1 == 8


def test_rank_rule_edge_cases():
    assert rank_from_singular_values(torch.zeros(1, dtype=torch.float64), (1, 1)) == (0, math.inf)
    assert rank_from_singular_values(torch.zeros(0, dtype=torch.float64), (0, 3)) == (0, math.inf)
    sv = torch.tensor([2.0, 1.0, 1e-20], dtype=torch.float64)
    r, gap = rank_from_singular_values(sv, (3, 3))
    assert r == 2 and gap == 1.0 / (2.0 * 3 * torch.finfo(torch.float64).eps)


def test_check_pairs_the_count_at_the_given_frequencies():
    config = AttentionConfig(d_model=8, n_heads=2, rope_fraction=1.0)
    freqs = torch.tensor([0.7, 0.7], dtype=torch.float64)
    m = measure(config, frequencies=freqs)
    c = check(config, m, frequencies=freqs)
    assert c.label == "" and c.identified == count(config, freqs).identified < count(config).identified
    assert c.agrees


def test_measure_passes_its_arguments_through():
    config = AttentionConfig(d_model=8, n_heads=2)
    m = measure(config, seq_len=5, n_sequences=3)
    assert m.n_rows == 3 * 5 * 8
    assert measure(config, seed=1).gap != measure(config, seed=0).gap
    assert MAX_SIZE < MAX_SEED
    assert measure(config, seed=MAX_SIZE + 1).rank == count(config).identified
    with pytest.raises(ConfigError):
        measure(config, seed=MAX_SEED + 1)


def test_structured_measurement_is_reported_in_float64_descending():
    config = AttentionConfig(d_model=8, n_heads=2, rope_fraction=1.0)
    freqs = torch.tensor([0.7, 0.7], dtype=torch.float64)
    m = measure(config, method="structured", frequencies=freqs)
    assert m.method == "structured" and m.rank == count(config, freqs).identified
    n = rank.default_seq_len(config)
    assert m.n_rows == rank.default_n_sequences(config, n) * n * 8
    sv = m.singular_values
    assert sv.dtype == torch.float64 and torch.equal(sv[1:], sv[1:].sort(descending=True).values)
    assert sv.numel() == 1 + m.n_params - m.rank


def test_auto_route_thresholds(monkeypatch):
    """"auto": dense up to AUTO_DENSE_MAX_PARAMS parameters inclusive, the block route above
    (where it applies; its certificate then stands and the structured route is not tried)."""
    calls = []
    real = blockrank.block_rank

    def spy(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(blockrank, "block_rank", spy)
    monkeypatch.setattr(fastrank, "structured_rank", None)        # never reached
    config = AttentionConfig(d_model=8, n_heads=2)                  # P = 256
    monkeypatch.setattr(rank, "AUTO_DENSE_MAX_PARAMS", 256)
    assert measure(config).method == "dense" and not calls
    monkeypatch.setattr(rank, "AUTO_DENSE_MAX_PARAMS", 255)
    assert measure(config).method == "block" and calls == [1]


def test_auto_falls_back_to_dense_only_when_small_and_uncertified(monkeypatch):
    real = fastrank.structured_rank

    def uncertified(*args, **kw):
        s = real(*args, **kw)
        return fastrank.StructuredRank(**{**s.__dict__, "gap": 10.0})

    monkeypatch.setattr(fastrank, "structured_rank", uncertified)
    monkeypatch.setattr(rank, "AUTO_DENSE_MAX_PARAMS", 100)
    config = AttentionConfig(d_model=8, n_heads=2, input_centered=True)   # P = 256 > 100, no block route
    assert blockrank.applicable(config) is not None
    auto = measure(config)
    assert auto.method == "dense" and auto.certified
    forced = measure(config, method="structured")
    assert forced.method == "structured" and forced.gap == 10.0 and not forced.certified
    monkeypatch.setattr(rank, "DENSE_FALLBACK_MAX_PARAMS", 256)      # P at the limit: still dense
    assert measure(config).method == "dense"
    monkeypatch.setattr(rank, "DENSE_FALLBACK_MAX_PARAMS", 255)      # above it: no fallback
    assert measure(config).method == "structured"
    assert (rank.AUTO_DENSE_MAX_PARAMS, rank.DENSE_FALLBACK_MAX_PARAMS) == (100, 255)


def test_auto_falls_back_from_an_uncertified_block_route(monkeypatch):
    """An uncertified block bound is not a rank: "auto" measures again by the structured route
    (up to STRUCTURED_FALLBACK_MAX_PARAMS), "block" reports it as not certified."""
    real = blockrank.block_rank

    def uncertified(*args, **kw):
        b = real(*args, **kw)
        return blockrank.BlockRank(**{**b.__dict__, "gap": 10.0, "certified": False})

    monkeypatch.setattr(blockrank, "block_rank", uncertified)
    monkeypatch.setattr(rank, "AUTO_DENSE_MAX_PARAMS", 100)
    config = AttentionConfig(d_model=8, n_heads=2)
    assert measure(config).method == "structured"
    forced = measure(config, method="block")
    assert forced.method == "block" and not forced.certified and forced.gap == 10.0
    monkeypatch.setattr(rank, "STRUCTURED_FALLBACK_MAX_PARAMS", 255)
    assert measure(config).method == "block"


def test_route_thresholds_are_the_documented_ones():
    # the reproducibility page and the rank module docstring state these sizes
    assert (rank.AUTO_DENSE_MAX_PARAMS, rank.DENSE_FALLBACK_MAX_PARAMS) == (2048, 6000)
    assert rank.STRUCTURED_FALLBACK_MAX_PARAMS == 70000


def test_measure_until_certified_defaults_to_one_attempt_and_passes_keywords(monkeypatch):
    config = AttentionConfig(d_model=8, n_heads=2)
    m, attempts = measure_until_certified(config, seq_len=5, n_sequences=3)
    assert len(attempts) == 1 and m.n_rows == 3 * 5 * 8
    seen = []

    def uncertified(config, seed=0, params=None, **kw):
        seen.append(kw)
        return rank.RankMeasurement(rank=1, n_params=2, n_rows=3, singular_values=torch.ones(2),
                                    gap=1.0, certified=False)

    monkeypatch.setattr(rank, "measure", uncertified)
    m, attempts = measure_until_certified(config, seq_len=5)
    assert len(attempts) == 1 and not m.certified and seen == [{"seq_len": 5}]
    m, attempts = measure_until_certified(config, max_attempts=3)
    assert [a["seed"] for a in attempts] == [0, 1, 2]
