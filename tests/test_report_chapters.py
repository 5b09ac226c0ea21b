"""The tables and generated sentences of chapters 1, 2, 3 and 5 (idlib.report.{prose, runs,
heads, biases, gqa}; idlib.studies.{biases, gqa}): real values, and the sentences change
when the data do."""
from __future__ import annotations

import math
from fractions import Fraction
from types import SimpleNamespace

import pytest

from idlib import AttentionConfig, count
from idlib.config import ConfigError
from idlib.report import biases as rb
from idlib.report import gqa as rg
from idlib.report import heads
from idlib.report.parameters import ParameterError, check_parameters, list_of
from idlib.report.prose import (listing, math_values, roundoff_words, seeds_text, tally)
from idlib.report.runs import distinct, run_cells, runs_summary
from idlib.studies import biases as bs
from idlib.studies import gqa as gs
from idlib.studies.rope import SeedRun, measure_seeds
from idlib.verdict import Check


def fake_run(config: AttentionConfig, ranks: list[int], gaps: list[float] | None = None) -> SeedRun:
    """A SeedRun with the closed form of ``config`` and the given measured ranks."""
    c = count(config)
    gaps = gaps or [1e9] * len(ranks)
    return SeedRun(tuple(Check(config, c.total, c.identified,
                               SimpleNamespace(rank=r, n_params=c.total, gap=g,
                                               certified=g >= 1e4))
                         for r, g in zip(ranks, gaps)))


# --- prose ----------------------------------------------------------------------------------

def test_tally_and_friends():
    assert tally(5, 5, "row") == "all 5 rows"
    assert tally(2, 2, "half", "halves") == "both halves"
    assert tally(4, 5, "row") == "4 of the 5 rows"
    assert tally(0, 3, "layer") == "none of the 3 layers"
    assert tally(1, 1, "row") == "the one row" and tally(0, 1, "row") == "not the one row"
    with pytest.raises(ValueError):
        tally(6, 5, "row")
    assert listing([1]) == "1" and listing([1, 2]) == "1 and 2" and listing("abc") == "a, b and c"
    assert seeds_text([0]) == "seed 0" and seeds_text([3, 4, 5]) == "seeds 3, 4 and 5"
    assert math_values("d", [2, 4, 8]) == "$d = 2$, $4$ and $8$"


def test_roundoff_words_by_size():
    assert roundoff_words(3e-15) == "less than $10^{-12}$"
    assert roundoff_words(3.14e-5) == "$3.1 \\cdot 10^{-5}$"
    assert roundoff_words(1.94) == "1.9" and roundoff_words(0.134) == "0.13"


# --- runs and chapters 1-2 --------------------------------------------------------------------

def test_runs_cells_show_every_seed():
    cfg = AttentionConfig(d_model=4)          # P = 64, I = 32
    agreeing = fake_run(cfg, [32, 32, 32])
    assert run_cells(agreeing) == ["64", "32", "32", "> 1e8", "yes", "50.00%"]
    split = fake_run(cfg, [32, 31], [1e9, 50.0])
    assert run_cells(split)[2:5] == ["31, 32", "1e1-1e2", "not certified"]
    assert distinct([3, 1, 3]) == "1, 3"
    line = runs_summary([agreeing, split], [0, 1, 2])
    assert line.startswith("1 of 2 configurations: measured rank = closed form at every seed "
                           "(seeds 0, 1 and 2); 4 of 5 measurements certified")
    assert line.endswith("smallest gap 1e1-1e2")


def test_single_head_table_and_verdict_from_measurements():
    seeds = [0, 1]
    runs = [measure_seeds(AttentionConfig(d_model=d), seeds) for d in (2, 3)]
    table = heads.single_head_table(runs, seeds)
    assert ":name: tab-sh-count" in table and "at seeds 0 and 1" in table
    assert "| 2 | 16 | 8 | 8 | > 1e8 | yes | 50.00% | 1/2 |" in table
    assert "| 3 | 36 | 18 | 18 | > 1e8 | yes | 50.00% | 1/2 |" in table
    verdict = heads.single_head_verdict(runs, seeds)
    assert "equals $2d^2$ in both rows" in verdict and "exactly one half in both rows" in verdict
    # a disagreeing measurement changes the sentence
    bad = runs[:1] + [fake_run(AttentionConfig(d_model=3), [17, 18])]
    assert "with a certified gap at each of the 2 seeds, in 1 of the 2 rows" in \
        heads.single_head_verdict(bad, seeds)


def test_many_heads_verdicts_count_the_data():
    sweep = {4: [fake_run(AttentionConfig(d_model=4, n_heads=H), [count(
        AttentionConfig(d_model=4, n_heads=H)).identified] * 2) for H in (1, 2, 4)]}
    assert heads.on_the_line(sweep) == (3, 3)
    assert heads.ratio_verdict(sweep).endswith("for all 3 points")
    sweep[4][1] = fake_run(AttentionConfig(d_model=4, n_heads=2), [56, 55])   # U 8, then 9
    assert heads.on_the_line(sweep) == (2, 3)
    general = [fake_run(AttentionConfig(d_model=4, n_heads=2, head_dim=6, value_dim=5), [64]),
               fake_run(AttentionConfig(d_model=6, n_heads=2), [108])]
    assert count(general[0].config).unidentified == 112 and count(general[1].config).unidentified == 36
    assert heads.wide_text(general) == "1 such configuration"
    assert "In both rows" in heads.general_verdict(general, [112, 36])
    assert "In 1 of the 2 rows" in heads.general_verdict(general, [112, 35])
    assert heads.all_verdict(general, [0]).endswith(
        "at each of the 1 seed, for both configurations of this chapter's tables")


# --- chapter 3 ------------------------------------------------------------------------------

def test_predicted_steps_follow_the_theorems():
    wide = AttentionConfig(d_model=4, n_heads=2, head_dim=6, value_dim=2)   # k > d, Gv = 4
    assert bs.predicted_step(wide, "q", "") == 2 * 4          # H min(k, d)
    assert bs.predicted_step(wide, "k", "qvo") == 0
    assert bs.predicted_step(wide, "v", "q") == 4 and bs.predicted_step(wide, "v", "o") == 0
    assert bs.predicted_step(wide, "o", "") == 4 and bs.predicted_step(wide, "o", "v") == 0
    with pytest.raises(ValueError):
        bs.predicted_step(AttentionConfig(d_model=4, rope_fraction=1.0), "k", "")


def test_rank_steps_on_a_measured_layer():
    runs = bs.subset_runs({"d_model": 4, "n_heads": 2}, [0])
    steps = bs.rank_steps(runs)
    assert [(s.bias, s.when, s.pairs) for s in steps] == [
        ("q", "always", 8), ("k", "always", 8), ("v", "without o", 4), ("v", "with o", 4),
        ("o", "without v", 4), ("o", "with v", 4)]
    assert [s.increases for s in steps] == [(4,), (0,), (4,), (0,), (4,), (0,)]
    assert all(s.agrees for s in steps)
    table = rb.steps_table([steps], [0])
    assert "| 1 | $b_Q$ | always | 8 | 4 | $H \\min(k, d) = 4$ | yes |" in table
    assert "| 1 | $b_K$ | always | 8 | 0 | 0 | yes |" in table
    assert rb.steps_verdict([steps]) == ("The measured increase equals the prediction in all 6 "
                                         "rows of {numref}`tab-bias-steps`.")


def test_bias_differences_measured():
    value = bs.value_bias({"d_model": 4, "n_heads": 2, "value_dim": 4}, [0])
    assert [(r.theorem, r.counted, r.measured) for r in value] == [(8, 8, (8,)), (4, 4, (4,))]
    assert all(r.agrees for r in value)
    assert "in the table: $d = 4$, $H = 2$, $G = 2$, $k = 2$, $v = 4$" in rb.value_verdict(value)
    rope = bs.key_bias_rope({"d_model": 8, "n_heads": 2, "head_dim": 4}, 1.0,
                            "second plane at 2 pi", [0])
    assert (rope.theorem, rope.counted, rope.measured) == (4, 4, (4,))
    sweep = bs.key_bias_sweep({"d_model": 4, "n_heads": 2}, [0.0, 1.0], [0])
    assert [s.theorem for s in sweep] == [4, 0] and all(s.agrees for s in sweep)
    assert rb.difference_verdict(sweep, "X", "$T$", sentence=False) == \
        "the measured count equals $T$ and `count`, every rank certified, in both rows of X"


def test_rope_cases_and_fixed_dimensions():
    cfg = AttentionConfig(d_model=8, n_heads=2, head_dim=4, rope_fraction=1.0)
    assert bs.fixed_dim(cfg, None) == 0
    assert bs.fixed_dim(cfg, bs.case_frequencies(cfg, "second plane at 2 pi")) == 2
    assert bs.fixed_dim(cfg, bs.case_frequencies(cfg, "second plane at pi")) == 0
    half = cfg.replace(rope_fraction=0.5)
    assert bs.fixed_dim(half, None) == 2
    assert "needs two rotated planes" in bs.case_problem(half, "second plane at pi")
    assert "'none' is the case without rotation" in bs.case_problem(cfg, "none")
    assert bs.case_problem(cfg.replace(rope_fraction=0.0), "none") is None


def test_published_models_and_their_sentences():
    gpt2, qwen = bs.published("gpt2.json"), bs.published("qwen2.5-7b.json")
    assert (gpt2.name, gpt2.layers, gpt2.config.bias) == ("GPT-2 (124M)", 12, "qkvo")
    assert (qwen.layers, qwen.config.n_kv_heads, qwen.config.bias) == (28, 4, "qkv")
    with pytest.raises(ConfigError, match="not all one softmax attention layer"):
        bs.published("deepseek-v2-lite.json")
    assert bs.published_problem("nope.json") == "'nope.json' is not a file of idlib/data/configs"
    text = rb.real_verdicts([gpt2, qwen])
    assert "In the GPT-2 (124M) layer the key and value biases are entirely redundant (768 + 768 " \
           "parameters): together 0.07% of the attention parameters, against 4.16%" in text
    assert "In the Qwen2.5 7B layer none of the biases is redundant: RoPE on $r = 128$" in text
    assert "| GPT-2 (124M) | 2,362,368 | 768 ($b_K$) + 768 ($b_V$) | 0.07% | 4.16% | 18,432 |" \
        in rb.real_table([gpt2])


def test_chapter_3_knob_rules_name_the_problem():
    rule = list_of(bs.rope_case_rule({"d_model": 8, "n_heads": 2, "head_dim": 4}))
    with pytest.raises(ParameterError, match=r"^rope_cases=.*: entry 0 \(\(0.5, 'second plane "
                                             r"at pi'\)\): 'second plane at pi' needs two"):
        check_parameters({"rope_cases": [(0.5, "second plane at pi")]}, rope_cases=rule)
    with pytest.raises(ParameterError, match=r"^rope_sweep_fractions=.*: entry 0 \(0.3\): "
                                             r"rope_fraction=0.3 times head_dim=8"):
        check_parameters({"rope_sweep_fractions": [0.3]},
                         rope_sweep_fractions=list_of(bs.fraction_rule({"d_model": 8, "n_heads": 1})))
    with pytest.raises(ParameterError, match=r"^real_models=.*: entry 0 \('deepseek-v2-lite.json'\)"):
        check_parameters({"real_models": ["deepseek-v2-lite.json"]}, real_models=list_of(bs.SHIPPED))


# --- chapter 5 ------------------------------------------------------------------------------

def test_chapter_5_knob_rules():
    assert gs.heads_rule(16).why(8) is None
    assert "must be an even integer" in gs.heads_rule(16).why(16)       # head width 1
    assert "divisible by n_heads=3" in gs.heads_rule(16).why(3)
    assert gs.groups_rule(16, 8).why(2) is None
    assert gs.groups_rule(16, 8).why(8).startswith("must be a divisor of n_heads=8 smaller")
    assert gs.PAIR.why((12, 6)) is None and "even integer" in gs.PAIR.why((12, 4))
    assert gs.PAIR.why([8]).startswith("must be a (d_model, n_heads) pair")


def gqa_theorem(c: AttentionConfig) -> int:
    """eq-gqa-count for k, v <= d without RoPE."""
    return c.n_kv_heads * (c.head_dim ** 2 + c.value_dim ** 2)


def test_gqa_sentences_count_the_data():
    moves = [("a", True, 1e-15), ("b", False, 0.134), ("c", False, 0.3), ("d", True, 2e-14)]
    assert rg.moves_verdict(moves) == (
        "In {numref}`tab-gqa-moves`, both moves of the group leave the output unchanged to "
        "round-off (below $10^{-12}$), and both other moves change it, by at least 0.13 of "
        "its size.")
    assert "1 of the 2 moves of the group" in rg.moves_verdict([("a", True, 0.5)] + moves[1:])
    runs = [fake_run(AttentionConfig(16, 8, n_kv_heads=G),
                     [count(AttentionConfig(16, 8, n_kv_heads=G)).identified]) for G in (8, 4, 2, 1)]
    assert [gqa_theorem(r.config) for r in runs] == [64, 32, 16, 8]
    assert rg.falls_with_groups(runs, gqa_theorem) and rg.agree(runs, gqa_theorem) == 4
    verdict = rg.removed_verdict(runs, gqa_theorem)
    assert verdict["fewer"] == "MQA has 576 parameters against 1,024 for MHA at the same $d$ and $H$"
    assert verdict["identified"].endswith("falls with $G$, from 960 for MHA to 568 for MQA")
    assert "| GQA | 4 | 768 | 736 | 32 | 256 | 1/8 | 4.17% (1/24) |" in rg.removed_table(runs, gqa_theorem)
    assert rg.main_verdict([runs], gqa_theorem).startswith("In all 4 rows")
    assert "In 3 of the 4 rows" in rg.main_verdict([runs], lambda c: gqa_theorem(c) + (c.n_kv_heads == 1))
    assert rg.figure_verdict(runs).endswith("for all 4 points")
    assert rg.pairs_math([(16, 8), (8, 4)]) == "$(d, H) = (16, 8)$ and $(8, 4)$"
    assert rg.kind(runs[0].config) == "MHA" and rg.kind(runs[-1].config) == "MQA"
    assert Fraction(gqa_theorem(runs[-1].config), runs[-1].total) == Fraction(1, 72)
    assert not math.isnan(runs[0].gap)


def test_gqa_group_moves_keep_the_output_exactly_when_in_the_group():
    from idlib import init_params, random_inputs
    from idlib.rank import default_seq_len
    from idlib.studies.rope import output_change
    config = AttentionConfig(8, 4, n_kv_heads=2)
    params = init_params(config, 0)
    X = random_inputs(config, 4, default_seq_len(config), 0)
    moves = gs.group_moves(config, params, 0)
    assert [inside for _, inside, _, _ in moves] == [True, False, False, True, False]
    for label, inside, layer, moved in moves:
        change = output_change(layer, params, moved, X)
        assert (change < 1e-12) == inside, (label, change)
