"""The census of published models (idlib.studies.census, idlib/data/configs): loading, counts, twins."""
from __future__ import annotations

import json
import re

import pytest

from idlib.studies import census
from idlib.config import AttentionConfig, ConfigError
from idlib.counting import count, unidentified_ratio_mha
from idlib.hf import approximation_note, config_from_file, config_from_hf

MODELS = {m.slug: m for m in census.load_models()}
ROWS = {r["slug"]: r for r in census.census_rows()}
HAS_LATENT = "kv_latent" in AttentionConfig.__dataclass_fields__
HAS_QK_NORM = "qk_norm" in AttentionConfig.__dataclass_fields__


def test_at_least_fifteen_models_each_with_a_source():
    assert len(MODELS) >= 15
    for m in MODELS.values():
        assert re.fullmatch(r"[\w.-]+/[\w.-]+/config\.json( \(text_config\))?", m.source), m.source
        assert m.checked_against and m.name
        assert m.confirmed == (not m.unconfirmed_fields)
        assert m.n_layers >= 1


@pytest.mark.parametrize("slug", sorted(MODELS))
def test_every_shipped_config_loads(slug):
    m = MODELS[slug]
    raw = json.loads(m.path.read_text())
    if "kv_lora_rank" in json.dumps(raw) and m.config is not None:
        assert m.status == "approximate"          # latent K/V: counted through the variant
    if m.status == "not representable":
        assert m.config is None and m.reason
        return
    try:
        direct = config_from_file(m.path)    # what `idlib count --config` reads
    except ConfigError as e:       # refused exactly: latent K/V, OLMo 2's all-head QK-norm
        assert "kv_lora_rank" in str(e) or "OLMo 2" in str(e)
        assert m.status == "approximate" and m.reason == approximation_note(raw)
        assert config_from_hf(raw, approximate=True) == m.config
        return
    extra = census.ARCHITECTURE_FIELDS.get(m.model_type, ({}, "", True))[0]
    assert direct.replace(**{k: v for k, v in extra.items() if hasattr(direct, k)}) == m.config


@pytest.mark.parametrize("slug", sorted(ROWS))
def test_counts_are_consistent_integers(slug):
    r = ROWS[slug]
    if r["per_layer_total"] is None:
        return
    for key in ("per_layer_total", "per_layer_identified", "per_layer_unidentified",
                "total", "identified", "unidentified"):
        assert isinstance(r[key], int) and not isinstance(r[key], bool)
    assert r["per_layer_identified"] + r["per_layer_unidentified"] == r["per_layer_total"]
    assert r["identified"] + r["unidentified"] == r["total"]
    assert r["total"] == r["layers"] * r["per_layer_total"]
    assert r["share"] == r["per_layer_unidentified"] / r["per_layer_total"]
    assert 0 < r["share"] < 1


def test_gpt2_small_by_hand():
    """d = 768, 12 heads of 64, biases on q, k, v, o, no RoPE, no grouping.

    Per head GL(k) on QK and GL(k) on VO (k^2 each); b_Q identified (k <= d); b_K invisible to
    softmax (all k per head); b_V absorbed by b_O (all v per head); b_O identified.
    """
    d, H, k = 768, 12, 64
    total = 4 * d * d + 3 * H * k + d
    unid = 2 * H * k * k + H * k + H * k
    r = ROWS["gpt2"]
    assert (r["layers"], r["per_layer_total"], r["per_layer_unidentified"]) == (12, total, unid)
    assert (total, unid) == (2_362_368, 99_840)
    assert r["total"] == 12 * total
    assert r["share_without_rope"] is None and r["share_without_grouping"] is None
    assert r["status"] == "exact"


def test_llama2_7b_by_hand():
    """d = 4096, 32 heads of 128, full RoPE with distinct frequencies: the QK commutant is
    GL(1, C) per plane, 2 per plane = k per head; VO keeps GL(k)."""
    d, H, k = 4096, 32, 128
    r = ROWS["llama-2-7b"]
    assert r["per_layer_total"] == 4 * d * d
    assert r["per_layer_unidentified"] == H * (k + k * k) == 528_384
    assert r["share_without_rope"] == unidentified_ratio_mha(H) == 1 / 64


def test_falcon_7b_is_multi_query():
    c = MODELS["falcon-7b"].config
    assert (c.n_heads, c.n_kv_heads, c.head_dim, c.rotary_dim) == (71, 1, 64, 64)
    # one key/value group: RoPE commutant 64 on QK, GL(64) on VO
    assert ROWS["falcon-7b"]["per_layer_unidentified"] == 64 + 64 * 64


def test_design_effects_match_the_plain_layers():
    # Llama 3 8B without its grouping is Llama 2 7B's layer shape (d 4096, 32 heads of 128)
    assert ROWS["llama-3-8b"]["share_without_grouping"] == ROWS["llama-2-7b"]["share"]
    # GPT-NeoX 20B: partial RoPE (24 of 96 dims) sits between full RoPE and none
    c = MODELS["gpt-neox-20b"].config
    assert c.rotary_dim == 24 and c.bias == "qkvo"
    full = count(c.replace(rope_fraction=1.0)).ratio
    assert full < ROWS["gpt-neox-20b"]["share"] < ROWS["gpt-neox-20b"]["share_without_rope"]
    # grouping raises the share of Mistral's layer, never lowers it
    assert ROWS["mistral-7b"]["share"] < ROWS["mistral-7b"]["share_without_grouping"]


def test_statuses():
    assert MODELS["olmo-2-7b"].status == "approximate"
    assert "all heads" in MODELS["olmo-2-7b"].reason or "whole projected" in MODELS["olmo-2-7b"].reason
    assert MODELS["deepseek-v2-lite"].status == ("approximate" if HAS_LATENT else "not representable")
    exact = {s for s, m in MODELS.items() if m.status == "exact"}
    assert exact >= {"gpt2", "bert-base", "llama-2-7b", "llama-3-8b", "mistral-7b", "qwen2.5-7b",
                     "gpt-neox-20b", "falcon-7b", "phi-3-mini", "smollm2-1.7b", "gemma-2-9b"}
    if HAS_QK_NORM:
        assert MODELS["qwen3-8b"].config.qk_norm == "gain"
        assert MODELS["gemma-3-4b"].config.qk_norm == "gain"
        assert ROWS["qwen3-8b"]["share_without_qk_norm"] == ROWS["llama-3-8b"]["share"]


def test_format_and_json():
    rows = census.census_rows()
    json.dumps(rows, allow_nan=False)
    text = census.format_census(rows)
    for r in rows:
        assert r["name"] in text
    assert text == census.census_table()
    assert len(text.splitlines()[0].split()) >= len(census.CENSUS_COLUMNS)


@pytest.mark.parametrize("slug", sorted(MODELS))
def test_twin_keeps_the_pattern(slug):
    c = MODELS[slug].config
    if c is None:
        return
    t = census.twin(c)
    assert t.d_model <= 16 and count(t).total <= census.TWIN_MAX_PARAMS
    assert t.group_size == min(c.group_size, 8)
    assert (t.n_kv_heads == t.n_heads) == (c.n_kv_heads == c.n_heads)
    assert t.rope_fraction == c.rope_fraction and t.bias == c.bias and t.causal == c.causal
    for name in census.VARIANT_FIELDS:
        if name != "kv_latent" and hasattr(c, name):
            assert getattr(t, name) == getattr(c, name)


@pytest.mark.parametrize("slug", ["gpt2", "qwen2.5-7b", "gemma-3-4b", "deepseek-v2-lite"])
def test_twins_agree_with_measured_rank(slug):
    c = MODELS[slug].config
    if c is None:
        pytest.skip("not representable with this AttentionConfig")
    r = census.twin_check(c, seed=0)
    assert r["certified"] and r["gap"] >= 1e6
    assert r["rank"] == r["closed_form_identified"]
    assert r["measured_unidentified"] == r["closed_form_unidentified"] > 0
    assert r["agrees"]
