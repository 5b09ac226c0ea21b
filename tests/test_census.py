"""The census of published models (idlib.studies.census, idlib/data/configs): loading, counts, twins."""
from __future__ import annotations

import json
import re

import pytest

from idlib.studies import census
from idlib.config import ConfigError
from idlib.counting import count, unidentified_ratio_mha
from idlib.config import RULES, AttentionConfig
from idlib.report.tables import layer_text
from idlib.config import LatentAttentionConfig
from idlib.hf import config_from_file, config_from_hf

MODELS = {m.slug: m for m in census.load_models()}
ROWS = {r["slug"]: r for r in census.census_rows()}

# slug -> (P per layer, U per layer, printed shares: layer, without RoPE, grouping, QK-norm)
EXPECTED = {
    "bert-base": (2362368, 99840, ("4.23%", "-", "-", "-")),
    "deepseek-v2-lite": (13763072, 655681, ("4.76%", "-", "-", "-")),
    "falcon-7b": (41877504, 4160, ("0.01%", "0.02%", "0.36%", "-")),
    "gemma-2-9b": (44040192, 526336, ("1.20%", "2.38%", "1.79%", "-")),
    "gemma-3-4b": (15729152, 262284, ("1.67%", "1.67%", "2.50%", "1.67%")),
    "gpt-neox-20b": (151019520, 933888, ("0.62%", "0.79%", "-", "-")),
    "gpt2": (2362368, 99840, ("4.23%", "-", "-", "-")),
    "llama-2-7b": (67108864, 528384, ("0.79%", "1.56%", "-", "-")),
    "llama-3-8b": (41943040, 132096, ("0.31%", "0.62%", "0.79%", "-")),
    "mistral-7b": (41943040, 132096, ("0.31%", "0.62%", "0.79%", "-")),
    "mixtral-8x7b": (41943040, 132096, ("0.31%", "0.62%", "0.79%", "-")),
    "olmo-2-7b": (67117056, 526338, ("0.78%", "0.79%", "-", "0.79%")),
    "phi-3-mini": (37748736, 297984, ("0.79%", "1.56%", "-", "-")),
    "qwen2.5-7b": (29364736, 66048, ("0.22%", "0.45%", "0.90%", "-")),
    "qwen3-8b": (41943296, 131176, ("0.31%", "0.31%", "0.78%", "0.31%")),
    "smollm2-1.7b": (16777216, 133120, ("0.79%", "1.56%", "-", "-")),
}


def test_every_shipped_model_is_in_the_table_with_a_source():
    assert sorted(MODELS) == sorted(EXPECTED)
    for m in MODELS.values():
        assert re.fullmatch(r"[\w.-]+/[\w.-]+/config\.json( \(text_config\))?", m.source), m.source
        assert m.checked_against and m.name
        assert m.confirmed == (not m.unconfirmed_fields)
    assert {s for s, m in MODELS.items() if not m.confirmed} == {"deepseek-v2-lite", "gemma-3-4b"}


@pytest.mark.parametrize("slug", sorted(EXPECTED))
def test_counts_and_printed_shares(slug):
    r, (P, U, shares) = ROWS[slug], EXPECTED[slug]
    assert (r["per_layer_total"], r["per_layer_unidentified"]) == (P, U)
    assert (r["total"], r["unidentified"], r["identified"]) == (r["layers"] * P, r["layers"] * U,
                                                               r["layers"] * (P - U))
    assert r["share"] == U / P
    assert census.table_cells(r)[5:] == list(shares)


@pytest.mark.parametrize("slug", sorted(EXPECTED))
def test_every_shipped_config_is_what_count_reads(slug):
    m = MODELS[slug]
    raw = json.loads(m.path.read_text())
    assert m.status == "exact" and config_from_file(m.path) == m.config == config_from_hf(raw)


def test_gpt2_small_by_hand():
    """d = 768, 12 heads of 64, biases on q, k, v, o, no RoPE, no grouping: per head GL(k) on QK
    and on VO (k^2 each); b_K invisible to softmax (k per head); b_V absorbed by b_O (v per head)."""
    d, H, k = 768, 12, 64
    assert (4 * d * d + 3 * H * k + d, 2 * H * k * k + 2 * H * k) == EXPECTED["gpt2"][:2]
    assert ROWS["gpt2"]["layers"] == 12 and ROWS["gpt2"]["share_without_rope"] is None


def test_rotary_models_by_hand():
    # Llama 2 7B: 32 heads of 128, full RoPE with distinct frequencies: k + k^2 per head
    assert 32 * (128 + 128 ** 2) == EXPECTED["llama-2-7b"][1]
    assert ROWS["llama-2-7b"]["share_without_rope"] == unidentified_ratio_mha(32) == 1 / 64
    # Falcon 7B: one key/value group of 64: RoPE commutant 64, GL(64) on VO
    c = MODELS["falcon-7b"].config
    assert (c.n_heads, c.n_kv_heads, c.head_dim, c.rotary_dim) == (71, 1, 64, 64)
    assert 64 + 64 ** 2 == EXPECTED["falcon-7b"][1]
    # Qwen2.5 7B: 4 groups of 128, biases q, k, v: no key-bias freedom under full RoPE, the value
    # bias moves the output in all G v = 512 <= d directions
    assert 4 * (128 + 128 ** 2) == EXPECTED["qwen2.5-7b"][1]
    # GPT-NeoX 20B: 96-dim heads, 24 rotated: 2 * 12 + 72^2 on QK, 96^2 on VO, 72 key-bias and
    # 96 value-bias dims per head
    assert 64 * (24 + 72 ** 2 + 96 ** 2 + 72 + 96) == EXPECTED["gpt-neox-20b"][1]
    # Gemma 3 4B: QK-norm with gains: per group m + 1 = 3 scalings, GL(256) on VO; the gains
    # lose one dim per rotating plane (128)
    assert 4 * (3 + 256 ** 2) + 128 == EXPECTED["gemma-3-4b"][1]
    # OLMo 2 7B: QK-norm over all 32 heads together, gains per dim: 2 scales, 64 gain
    # exchanges per group (one per plane), GL(128) on VO; gains add (32 + 32) * 128 parameters
    assert (4 * 4096 ** 2 + 64 * 128, 2 + 32 * (64 + 128 ** 2)) == EXPECTED["olmo-2-7b"][:2]


def test_design_effects():
    assert ROWS["llama-3-8b"]["share_without_grouping"] == ROWS["llama-2-7b"]["share"]
    assert ROWS["qwen3-8b"]["share_without_qk_norm"] == ROWS["llama-3-8b"]["share"]
    c = MODELS["gpt-neox-20b"].config
    assert (c.rotary_dim, c.bias) == (24, "qkvo")
    assert count(c.replace(rope_fraction=1.0)).ratio < ROWS["gpt-neox-20b"]["share"] \
        < ROWS["gpt-neox-20b"]["share_without_rope"]


def test_statuses():
    assert {s for s, m in MODELS.items() if m.status != "exact"} == set()
    assert MODELS["olmo-2-7b"].config.qk_norm == "whole"
    assert isinstance(MODELS["deepseek-v2-lite"].config, LatentAttentionConfig)
    assert MODELS["qwen3-8b"].config.qk_norm == MODELS["gemma-3-4b"].config.qk_norm == "gain"


def test_format_and_json():
    rows = census.census_rows()
    assert json.loads(json.dumps(rows, allow_nan=False)) == rows
    lines = census.format_census(rows).splitlines()
    assert lines[0].split("  ")[0].strip() == "model" and [c for c in lines[0].split("  ") if c] == \
        [c.rjust(len(c)) for c in lines[0].split("  ") if c]
    header = [c.strip() for c in re.split(r"\s{2,}", lines[0].strip())]
    assert header == list(census.CENSUS_COLUMNS)
    gpt2 = next(line for line in lines if line.startswith("GPT-2"))
    assert re.split(r"\s{2,}", gpt2.strip()) == ["GPT-2 (124M)", "12", "2,362,368", "28,348,416",
                                                  "99,840", "4.23%", "-", "-", "-"]
    assert not any(": approximate:" in line or ": not representable:" in line for line in lines)
    deepseek = next(line for line in lines if line.startswith("DeepSeek-V2-Lite"))
    assert re.split(r"\s{2,}", deepseek.strip()) == ["DeepSeek-V2-Lite *", "27", "13,763,072",
                                                      "371,602,944", "655,681", "4.76%", "-", "-", "-"]


@pytest.mark.parametrize("slug", sorted(s for s, m in MODELS.items()
                                        if not isinstance(m.config, LatentAttentionConfig)))
def test_twin_keeps_the_pattern(slug):
    c = MODELS[slug].config
    t = census.twin(c)
    assert t.d_model <= 16 and count(t).total <= census.TWIN_MAX_PARAMS
    assert t.group_size == min(c.group_size, 8)
    assert (t.n_kv_heads == t.n_heads) == (c.n_kv_heads == c.n_heads)
    sizes = set(census.SIZE_FIELDS) | {"rope_base", "kv_latent"}    # what a twin may rescale
    kept = [name for name in RULES if name not in sizes]
    assert {n: getattr(t, n) for n in kept} == {n: getattr(c, n) for n in kept}


def test_a_twin_keeps_every_variant_field():
    """Every field that is not a size is carried: Gemma 2's soft-cap (left out before), sinks,
    ALiBi and the gate too; a variant without the twin capability has no twin."""
    gemma2 = MODELS["gemma-2-9b"].config
    assert gemma2.softcap == 50.0 and census.twin(gemma2).softcap == 50.0
    layer = AttentionConfig(d_model=64, n_heads=8, n_kv_heads=2, rope_fraction=1.0, bias="qkvo",
                            sinks=True, causal=True)
    t = census.twin(layer)
    assert (t.sinks, t.bias, t.group_size, t.causal) == (True, "qkvo", 4, True)
    gated = census.twin(AttentionConfig(d_model=64, n_heads=8, output_gate=True, alibi=True))
    assert gated.output_gate and gated.alibi


@pytest.mark.parametrize("slug, twin, identified, unidentified", [
    ("gpt2", "d=8 H=4 G=4 k=2 v=2 b_Q b_K b_V b_O causal", 240, 48),   # 2 * 4 * 2^2 + 4 * 2 + 4 * 2
    ("qwen2.5-7b", "d=14 H=7 G=1 k=2 v=2 r=2 b_Q b_K b_V causal", 460, 6),
    ("gemma-3-4b", "d=10 H=4 G=2 k=2 v=2 r=2 causal QK-norm gain", 229, 15)])
def test_twins_agree_with_measured_rank(slug, twin, identified, unidentified):
    r = census.twin_check(MODELS[slug].config, seed=0)
    assert layer_text(r["twin"]) == twin
    assert r["certified"] and r["gap"] >= 1e6 and r["agrees"]
    assert (r["rank"], r["closed_form_identified"]) == (identified, identified)
    assert (r["measured_unidentified"], r["closed_form_unidentified"]) == (unidentified, unidentified)
