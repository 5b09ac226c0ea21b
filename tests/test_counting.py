"""The closed-form count: known values, hand-derived sizes, and equality with the measured rank."""
import itertools
import math
from collections import Counter
from fractions import Fraction

import pytest
import torch

from idlib.attention import n_params
from idlib.config import AttentionConfig, ConfigError
from idlib.counting import (_standard_classes, count, factor_fiber, rope_commutant_dim,
                            rotation_classes, unidentified_ratio_mha)
from idlib.rank import CERTIFY_GAP, measure, rank_from_singular_values

BIASES = ["".join(s) for n in range(5) for s in itertools.combinations("qkvo", n)]   # all 16

# -- the grid: every field and combination, d <= 8 ------------------------------------------
SHAPES = [  # (d, H, G, k, v, rope_fraction)
    (1, 1, 1, None, None, 0.0),           # the smallest layer
    (2, 1, 1, None, None, 1.0),
    (4, 1, 1, None, None, 0.0),           # one head, k = v = d
    (4, 2, 2, None, None, 0.0),
    (6, 3, 3, None, None, 0.0),
    (8, 4, 2, None, None, 0.0),           # GQA
    (8, 4, 1, None, None, 0.0),           # MQA
    (6, 6, 1, None, None, 0.0),           # one dimension per head, MQA
    (8, 2, 2, 2, 2, 0.0),                 # head dims below d/H
    (6, 2, 1, 1, 2, 0.0),
    (4, 2, 2, 3, 3, 0.0),                 # above d/H, at most d
    (8, 4, 2, 6, 3, 0.0),
    (3, 1, 1, 5, 4, 0.0),                 # wider than d
    (4, 2, 1, 6, 5, 0.0),
    (2, 2, 2, 4, 3, 0.0),
    (6, 2, 2, 3, 1, 0.0),                 # value width different from key width
    (6, 1, 1, 2, 7, 0.0),
    (4, 1, 1, None, None, 1.0),           # full RoPE
    (8, 2, 2, None, None, 1.0),
    (8, 4, 2, None, None, 1.0),
    (8, 4, 1, 4, 2, 1.0),
    (8, 1, 1, 6, None, 2 / 3),            # partial RoPE
    (8, 2, 2, 4, None, 0.5),
    (6, 2, 1, 6, 3, 1 / 3),               # partial RoPE on a head as wide as d
    (8, 2, 2, 8, 4, 0.75),
]
GRID = []
for i, (d, H, G, k, v, f) in enumerate(SHAPES):
    for j in range(2):                    # two bias subsets per shape, cycling through all 16
        GRID.append(dict(d_model=d, n_heads=H, n_kv_heads=G, head_dim=k, value_dim=v,
                         rope_fraction=f, bias=BIASES[(2 * i + j * 5) % 16], causal=bool((i + j) % 2)))
# repeated RoPE frequencies (base 1: every theta_i = 1) and a small base
GRID += [dict(d_model=6, head_dim=6, rope_fraction=1.0, rope_base=1.0, bias="k"),
         dict(d_model=8, n_heads=2, head_dim=6, rope_fraction=2 / 3, rope_base=1.0, bias="qkvo"),
         dict(d_model=8, n_heads=2, rope_fraction=1.0, rope_base=100.0, causal=True, bias="qk"),
         dict(d_model=6, n_heads=3, n_kv_heads=1, rope_fraction=1.0, rope_base=500000.0, bias="kv")]
# every bias subset on one GQA shape (so each subset also meets grouped heads)
GRID += [dict(d_model=6, n_heads=2, n_kv_heads=1, head_dim=2, value_dim=3, bias=b, causal=True)
         for b in BIASES[::3]]


def _id(kw):
    c = AttentionConfig(**kw)
    return (f"d{c.d_model}H{c.n_heads}G{c.n_kv_heads}k{c.head_dim}v{c.value_dim}r{c.rotary_dim}"
            f"b{c.rope_base:g}-{c.bias or 'none'}{'-causal' if c.causal else ''}")


@pytest.mark.parametrize("kw, qk, vo, total", [
    # heads wider than d: k > b, so R^T is injective: b k + a (k - b) (QK), same for VO
    (dict(d_model=3, head_dim=5, value_dim=4), 3 * 5 + 3 * 2, 3 * 4 + 3 * 1, 2 * 15 + 2 * 12),
    # one dimension per head, 6 heads sharing one K/V head: one scaling per group, QK and VO
    (dict(d_model=6, n_heads=6, n_kv_heads=1), 1, 1, 36 + 6 + 6 + 36),
    # partial RoPE: 2 distinct planes (2 dims each) and GL(2) on the 2 pass-through dims
    (dict(d_model=8, head_dim=6, rope_fraction=2 / 3), 2 * 2 + 2 ** 2, 36, 4 * 48),
    # base 1: the 3 planes share theta = 1, one class, GL(3, C) = 2 * 3^2
    (dict(d_model=6, rope_fraction=1.0, rope_base=1.0), 2 * 3 ** 2, 36, 4 * 36),
    # heads below d / H: k^2 per group, GQA
    (dict(d_model=8, n_heads=4, n_kv_heads=2, head_dim=2, value_dim=3), 2 * 4, 2 * 9,
     4 * 8 * 2 + 2 * 8 * 2 + 2 * 8 * 3 + 4 * 3 * 8),
], ids=str)
def test_hand_derived_counts(kw, qk, vo, total):
    c = count(AttentionConfig(**kw))
    assert (c.component("qk").unidentified, c.component("vo").unidentified) == (qk, vo)
    assert c.total == total == n_params(AttentionConfig(**kw))


@pytest.mark.parametrize("planes", [1, 3, 64, 1000, 5000])
@pytest.mark.parametrize("base", [1.0, 2.0, 100.0, 1e4, 5e5, 1e8, 1e12, 1e20])
def test_closed_form_classes_equal_the_tabulated_ones(planes, base):
    """Standard RoPE classes in closed form = sorting the frequencies (crowded ones included)."""
    f = base ** (-2.0 * torch.arange(planes, dtype=torch.float64) / (2 * planes))
    mults, plus, minus = _standard_classes(planes, base)
    tab_mults, tab_plus, tab_minus = rotation_classes(f, 0)
    assert (mults, plus, minus) == (Counter(tab_mults), tab_plus, tab_minus)


# Non-round bases: no frequency and no difference of two lands on DELTA within rounding (at such a
# tie, e.g. 30 planes with base 1e10, theta_27 = 1e-9, the two routes compute theta_s by different
# float64 expressions and may put the plane on either side; the tolerance decides, not the layer).
# (2895, 3.77e7) ends on a run of equal classes cut short by the last rotating plane; (300, 1e8)
# walks several runs; the others have planes at +1 (theta below DELTA).
OFF_GRID = [(2895, 37684417.464558154), (300, 1e8), (2258, 44016710416.067), (1271, 4.503103882268926e20),
            (3734, 2.256843414714486e29), (7, 3.3), (4097, 12345.678)]


@pytest.mark.parametrize("planes,base", OFF_GRID)
def test_closed_form_classes_off_the_round_bases(planes, base):
    f = base ** (-2.0 * torch.arange(planes, dtype=torch.float64) / (2 * planes))
    mults, plus, minus = _standard_classes(planes, base)
    tab_mults, tab_plus, tab_minus = rotation_classes(f, 0)
    assert (mults, plus, minus) == (Counter(tab_mults), tab_plus, tab_minus)
    assert sum(mu * n for mu, n in mults.items()) + plus // 2 == planes


def test_closed_form_classes_of_no_plane():
    assert _standard_classes(0, 1e4) == (Counter(), 0, 0) == _standard_classes(0, 1.0)


def test_crowded_frequencies_merge():
    """base 1e8 over 1000 planes: the lowest frequencies are closer than the tolerance 1e-9."""
    mults, plus, minus = _standard_classes(1000, 1e8)
    assert sum(mu * n for mu, n in mults.items()) == 1000 and (plus, minus) == (0, 0)
    assert max(mults) > 1 and mults[1] < 1000


@pytest.mark.parametrize("kw", GRID, ids=[_id(kw) for kw in GRID])
def test_count_equals_measured_rank(kw):
    config = AttentionConfig(**kw)
    c = count(config)
    m = measure(config, seed=0)
    assert m.certified, m.describe()
    assert m.gap >= CERTIFY_GAP
    assert c.total == n_params(config) == m.n_params
    assert m.rank == c.identified, (m.describe(), c.to_dict())
    assert c.unidentified == m.unidentified


@pytest.mark.parametrize("kw", [GRID[5], GRID[20], GRID[41], GRID[-1]], ids=_id)
def test_count_equals_measured_rank_other_seed(kw):
    config = AttentionConfig(**kw)
    m = measure(config, seed=7)
    assert m.certified and m.rank == count(config).identified


@pytest.mark.parametrize("freqs, pass_dims, expect", [
    ([math.pi], 0, 4),              # eigenvalue -1 on one plane: GL(2), 2^2 = 4 (nu_- = 2)
    ([0.5, 0.5], 0, 8),             # one frequency twice: GL(2, C), 2 * 2^2 = 8
    ([0.5, 0.7], 2, 2 + 2 + 4),     # two distinct planes (2 each) + GL(2) on the pass dims
])
def test_repeated_and_special_frequencies(freqs, pass_dims, expect):
    """Measured with the same frequencies the count uses (chapter 4's conditions)."""
    f = torch.tensor(freqs, dtype=torch.float64)
    assert rope_commutant_dim(f, pass_dims) == expect
    k = 2 * len(freqs) + pass_dims
    config = AttentionConfig(d_model=k, head_dim=k, rope_fraction=2 * len(freqs) / k)
    c = count(config, frequencies=f)
    assert c.component("qk").unidentified == expect
    m = measure(config, seed=0, frequencies=f)
    assert m.certified and m.rank == c.identified


# -- closed-form values ---------------------------------------------------------------------

@pytest.mark.parametrize("d", [1, 2, 3, 8, 64, 768])
def test_single_head_full_width_is_half_unidentified(d):
    c = count(AttentionConfig(d_model=d))
    assert (c.total, c.unidentified) == (4 * d * d, 2 * d * d)
    assert c.ratio == 0.5


@pytest.mark.parametrize("d, H", [(12, 1), (12, 2), (12, 3), (12, 4), (12, 6), (12, 12), (768, 12),
                                  (4096, 32)])
def test_mha_ratio_is_one_over_2h(d, H):
    c = count(AttentionConfig(d_model=d, n_heads=H))
    assert Fraction(c.unidentified, c.total) == Fraction(1, 2 * H)
    assert c.ratio == unidentified_ratio_mha(H) == 1 / (2 * H)
    assert c.unidentified == 2 * d * d // H and c.total == 4 * d * d


def test_never_fully_identified():
    """C3: every head keeps at least its k^2 + v^2 moves."""
    for d, H in [(6, 6), (12, 12), (8, 8)]:
        c = count(AttentionConfig(d_model=d, n_heads=H))
        assert c.unidentified == 2 * H > 0                    # a scaling per head, QK and VO


def test_gpt2_count_by_hand():
    """GPT-2 small attention: d=768, H=12, k=v=64, biases qkvo, no RoPE."""
    c = count(AttentionConfig(d_model=768, n_heads=12, bias="qkvo", causal=True))
    assert c.component("qk").unidentified == 12 * 64 ** 2
    assert c.component("vo").unidentified == 12 * 64 ** 2
    assert c.component("b_Q").unidentified == 0
    assert c.component("b_K").unidentified == 768            # the whole key bias
    assert c.component("b_V").unidentified == 768            # folds into b_O
    assert c.component("b_O").unidentified == 0
    assert c.total == 4 * 768 ** 2 + 4 * 768
    assert c.unidentified == 2 * 12 * 64 ** 2 + 2 * 768


def test_llama3_8b_count_by_hand():
    """d=4096, H=32, G=8, k=v=128, full RoPE (64 distinct frequencies), no biases."""
    c = count(AttentionConfig(d_model=4096, n_heads=32, n_kv_heads=8, rope_fraction=1.0,
                              rope_base=500000.0))
    assert c.component("qk").total == (32 + 8) * 4096 * 128
    assert c.component("qk").unidentified == 8 * 64 * 2      # per group: 64 planes, C* each
    assert c.component("vo").unidentified == 8 * 128 ** 2    # per group: GL(128)
    assert c.unidentified == 8 * 128 + 8 * 128 ** 2


def test_value_bias_without_output_bias():
    """b_V adds the constant sum_h b_V^g W_O^h: identified in min(d, G v) directions."""
    c = count(AttentionConfig(d_model=4, n_heads=2, n_kv_heads=2, bias="v"))
    assert c.component("b_V").unidentified == 0              # G v = 4 = d
    c = count(AttentionConfig(d_model=3, n_heads=2, head_dim=3, bias="v"))
    assert c.component("b_V").unidentified == 2 * 3 - 3      # G v = 6 > d = 3
    c = count(AttentionConfig(d_model=6, n_heads=2, bias="vo"))
    assert c.component("b_V").unidentified == 6


def test_factor_fiber_cases():
    assert factor_fiber(8, 8, 4, 1) == 16                    # k <= b: GL(k)
    assert factor_fiber(8, 8, 4, 3) == 16                    # shared by a group
    assert factor_fiber(2, 8, 4, 1) == 2 * 4 + 2 * 8         # L sees only s = 2 directions
    assert factor_fiber(3, 3, 5, 1) == 3 * 5 + 3 * 2         # k > b


def test_rotation_classes():
    mults, plus, minus = rotation_classes([0.5, 0.5, 1.0, 0.0, math.pi], pass_dims=3)
    assert sorted(mults) == [1, 2] and plus == 3 + 2 and minus == 2


def test_count_components_and_dict():
    config = AttentionConfig(d_model=6, n_heads=2, n_kv_heads=1, bias="qkvo")
    c = count(config)
    assert [x.name for x in c.components] == ["qk", "vo", "b_Q", "b_K", "b_V", "b_O"]
    d = c.to_dict()
    assert set(d) >= {"total", "identified", "unidentified", "share", "components"}
    assert sum(v["total"] for v in d["components"].values()) == d["total"]
    assert all(v["identified"] + v["unidentified"] == v["total"] for v in d["components"].values())
    assert count(AttentionConfig(d_model=6, n_heads=2)).to_dict()["components"].keys() == {"qk", "vo"}


def test_rank_from_singular_values():
    eps = torch.finfo(torch.float64).eps
    sv = torch.tensor([3.0, 2.0, 1.0, 1e-15, 1e-17], dtype=torch.float64)
    rank, gap = rank_from_singular_values(sv, (10, 5))   # tolerance tau = 3 * 10 * eps = 6.7e-15
    # sigma_4 = 1e-15 lies below tau, so the gap is sigma_3 / tau, not sigma_3 / sigma_4.
    assert rank == 3 and gap == pytest.approx(1.0 / (3 * 10 * eps))
    rank, gap = rank_from_singular_values(torch.tensor([2.0, 1.0], dtype=torch.float64), (4, 2))
    assert rank == 2 and gap == pytest.approx(1.0 / (2 * 4 * eps))   # full rank: sigma_r / tau
    assert rank_from_singular_values(torch.zeros(3, dtype=torch.float64), (3, 3)) == (0, math.inf)


def test_class_size_guard_fires_exactly_past_its_limit(monkeypatch):
    """base 1e8 over 1000 planes walks 6 runs of class sizes (sizes 1..5 and the last cut): a limit
    of 6 counts it, a limit of 5 refuses it with the rule named."""
    import idlib.fibers as counting
    monkeypatch.setattr(counting, "MAX_CLASS_SIZES", 6)
    assert sum(mu * n for mu, n in _standard_classes(1000, 1e8)[0].items()) == 1000
    monkeypatch.setattr(counting, "MAX_CLASS_SIZES", 5)
    with pytest.raises(ConfigError) as err:
        _standard_classes(1000, 1e8)
    assert str(err.value) == ("rotary planes=1000 with rope_base=1e+08: adjacent frequencies closer "
                              "than the tolerance 1e-09 form more than 5 class sizes; this count is "
                              "not computed (use fewer rotary dimensions)")


def test_frequency_and_base_refusals_word_for_word():
    config = AttentionConfig(d_model=8, n_heads=2, rope_fraction=1.0)
    with pytest.raises(ConfigError) as e:
        count(config, [0.1, 0.2, 0.3])
    assert str(e.value) == ("count: frequencies=[0.1, 0.2, 0.3] must be None or a 1-D sequence or tensor"
                            " of finite real angles, one per rotation plane: 3 given, the layer has "
                            "rotary_dim / 2 = 2 rotation planes (one angle each)")
    with pytest.raises(ConfigError) as e:
        count(config, 0.5)
    assert str(e.value) == "count: frequencies=0.5 must be None or a 1-D sequence or tensor of finite real angles, one per rotation plane"
    huge = AttentionConfig(d_model=2 ** 23 + 2, n_heads=1, rope_fraction=1.0, rope_base=0.5)
    with pytest.raises(ConfigError) as e:
        count(huge)
    assert str(e.value) == (f"rope_base=0.5 < 1 with {2 ** 22 + 1} rotation planes: at most "
                            f"{2 ** 22} are counted")
    with pytest.raises(ConfigError) as e:
        count(config, [0.1, float("nan")])
    assert str(e.value) == "count: frequencies=[0.1, nan] must be None or a 1-D sequence or tensor of finite real angles, one per rotation plane"
