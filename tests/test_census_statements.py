"""Chapter 8's statements in words, checked against the census data.

The chapter pastes its numbers (``{glue:text}``) from ``idlib.studies.census``; the words around
them ("roughly halves", "changes it little", "no census model has m = 3", "the rotation most of
all", ...) are checked here against the same rows.
"""
import json
from fractions import Fraction

import pytest

from idlib.config import AttentionConfig
from idlib.counting import count
from idlib.studies import census


@pytest.fixture(scope="module")
def data():
    models = census.load_models()
    return models, census.census_rows()


def by_name(rows, name):
    return next(r for r in rows if r["name"] == name)


def test_rope_roughly_halves_where_it_covers_everything(data):
    models, rows = data
    values = census.effect_summary(rows, models)
    lo, hi = (float(x) for x in values["census-rope-full"].split(" to "))
    assert 1.9 < lo <= hi < 2.0
    assert int(values["census-rope-full-n"]) >= 5


def test_qk_norm_changes_little_where_rope_turns_everything_and_a_lot_for_qwen3_next(data):
    models, rows = data
    by_slug = {m.slug: m for m in models}
    for r in rows:
        if r["share_without_qk_norm"] is None:
            continue
        types = by_slug[r["slug"]].model.counted
        full = all(t.config.rotary_dim == t.config.head_dim for t in types)
        factor = r["share_without_qk_norm"] / r["share"]
        if full:
            assert factor < 1.05, r["name"]
    qwen = by_name(rows, "Qwen3-Next 80B-A3B")
    assert qwen["share_without_qk_norm"] / qwen["share"] > 10
    cfg = by_slug[qwen["slug"]].model.counted[0].config
    assert Fraction(cfg.rotary_dim, cfg.head_dim) <= Fraction(1, 2)   # most of each head unrotated


def test_with_gains_rope_has_little_left_to_remove(data):
    models, rows = data
    by_slug = {m.slug: m for m in models}
    seen = 0
    for r in rows:
        m = by_slug[r["slug"]].model
        if r["share_without_rope"] is None or m is None:
            continue
        if all(t.config.qk_norm in ("gain", "whole") for t in m.counted):
            seen += 1
            assert r["share_without_rope"] / r["share"] < 1.05, r["name"]
    assert seen >= 3


def test_grouping_factor_is_m_plus_1_over_2_for_the_theorem_s_layers(data):
    models, rows = data
    factors = {name: (m, f) for name, m, f in census.grouping_factors(rows, models)}
    theorem = [m for m in models if m.config is not None and census.plain_rotary(m.config)
               and m.config.group_size > 1]
    assert theorem
    for m in theorem:
        size, factor = factors[m.name]
        assert factor == Fraction(size + 1, 2), m.name
    assert census.effect_summary(rows, models)["census-grouping"].startswith("36.0 for Falcon 7B")


def test_no_schedule_can_fail_and_the_margin_sits_at_the_slow_end(data):
    models, _ = data
    for name, config in census.rope_schedules(models):
        c = config.rope_head() if hasattr(config, "rope_head") else config
        assert c.rope_base > 1, name
        margin, where = census.angle_margin(config)
        assert where.endswith("the two slowest") or where == f"plane {c.rotary_dim // 2} to 0", \
            (name, where)
        assert census.frequencies_generic(config)[0] is True


def test_no_census_model_has_groups_of_three(data):
    models, _ = data
    sizes = census.group_sizes(models)
    assert 3 not in sizes and 2 in sizes and 4 in sizes


def test_twins_keep_the_group_size_up_to_8_at_width_16_at_most(data):
    models, _ = data
    for m in models:
        for t in m.model.counted if m.model else ():
            if isinstance(t.config, AttentionConfig):
                tw = census.twin(t.config)
                assert tw.d_model <= 16
                assert tw.group_size == min(t.config.group_size, 8)
    falcon = next(m for m in models if m.name == "Falcon 7B")
    assert falcon.config.group_size == 71 and census.twin(falcon.config).group_size == 8
    llama2 = next(m for m in models if m.name == "Llama 2 7B")
    assert count(llama2.config).total == 4 * 4096 ** 2


def test_the_rotation_is_the_largest_part_beyond_attention(data):
    _, rows = data
    llama = next(r for r in rows if r["slug"] == "llama-3-8b")
    lines, values = census.beyond_attention(llama)
    d, L = llama["config"]["d_model"], llama["layers"]
    rotation = d * (d - 1) // 2
    assert rotation > llama["unidentified"] > 2 * L * d
    assert float(values["census-rotation-ratio"]) == pytest.approx(rotation / llama["unidentified"],
                                                                  abs=0.005)


@pytest.mark.parametrize("slug", ["qwen3-8b", "gemma-3-4b", "olmo-2-7b"])
def test_qk_norm_is_added_from_the_family_not_read_from_the_file(data, slug):
    models, _ = data
    m = next(x for x in models if x.slug == slug)
    text = json.dumps({k: v for k, v in m.hf.items() if not k.startswith("_")})
    assert "qk_norm" not in text and "qk_layernorm" not in text
    assert all(t.config.qk_norm != "none" for t in m.model.counted)


def test_tables_are_numbered(data):
    models, rows = data
    checks = [census.data_table(models), census.angles_table(models)[0],
              census.closed_form_table(models)[0], census.census_markdown(rows, models)[0],
              census.effects_markdown(rows)]
    names = ["tab-census-data", "tab-census-angles", "tab-census-formula", "tab-census",
             "tab-census-effects"]
    for table, name in zip(checks, names):
        assert table.startswith(":::{table} ") and f":name: {name}\n" in table
