"""idlib.hf on the attention people run in 2026: ALiBi, sinks, gating, NoPE and mixed layers, the
families added with them, whole models by layer type, and --family never dropping structure.
Configs are written by transformers' own config classes (``to_dict()``, no network)."""
from __future__ import annotations

import json
import re

import pytest
import transformers

from idlib.cli import main
from idlib.config import AttentionConfig, ConfigError
from idlib.counting import count
from idlib.hf import FAMILIES, config_from_hf, model_from_hf
from idlib.model import count_model


def t5dict(cls: str, **kw) -> dict:
    return getattr(transformers, cls)(**kw).to_dict()


SMALL = dict(hidden_size=16, num_attention_heads=4, num_key_value_heads=2)


@pytest.mark.parametrize("cls, kw, expected", [
    ("BloomConfig", dict(hidden_size=16, n_head=4), dict(alibi=True, bias="qkvo", rope_fraction=0.0,
                                                         n_kv_heads=4)),
    ("MptConfig", dict(d_model=16, n_heads=4), dict(alibi=True, bias="", rope_fraction=0.0)),
    ("MptConfig", dict(d_model=16, n_heads=4, no_bias=False), dict(alibi=True, bias="")),
    ("FalconConfig", dict(hidden_size=16, num_attention_heads=4, alibi=True, bias=True),
     dict(alibi=True, rope_fraction=0.0, bias="qkvo", n_kv_heads=1)),
    ("GptOssConfig", dict(SMALL, head_dim=4), dict(sinks=True, bias="qkvo", rope_fraction=1.0,
                                                   n_kv_heads=2)),
    ("Qwen3NextConfig", dict(SMALL, head_dim=8), dict(output_gate=True, qk_norm="gain", rotary_dim=2)),
    ("HeliumConfig", dict(SMALL, head_dim=4, attention_bias=True), dict(bias="qkv", rope_fraction=1.0)),
    ("Ernie4_5Config", dict(SMALL, head_dim=4, use_bias=True), dict(bias="qkvo")),
    ("CodeGenConfig", dict(n_embd=16, n_head=4, rotary_dim=2), dict(rotary_dim=2, bias="")),
    ("MinistralConfig", dict(SMALL, head_dim=4), dict(bias="", n_kv_heads=2)),
    ("SeedOssConfig", dict(SMALL, head_dim=4), dict(bias="qkv")),
    ("SeedOssConfig", dict(SMALL, head_dim=4, attention_out_bias=True), dict(bias="qkvo")),
    ("GraniteMoeConfig", dict(SMALL, attention_bias=True), dict(bias="qkvo")),
    ("NemotronConfig", dict(SMALL, head_dim=4), dict(rotary_dim=2)),
    ("Olmo3Config", dict(SMALL), dict(qk_norm="whole")),
], ids=lambda x: x if isinstance(x, str) else None)
def test_new_families_read_as_transformers_builds_them(cls, kw, expected):
    c = config_from_hf(t5dict(cls, **kw))
    for key, value in expected.items():
        assert getattr(c, key) == value, key


def test_smollm3_without_rope_on_any_layer_counts_64_of_768(capsys):
    """The issue's case: no_rope_layers [0, 0] switches RoPE off on both layers (it was counted
    with RoPE, 40)."""
    data = t5dict("SmolLM3Config", **SMALL, num_hidden_layers=2, no_rope_layers=[0, 0])
    c = config_from_hf(data)
    assert (c.rotary_dim, count(c).total, count(c).unidentified) == (0, 768, 64)
    with_rope = config_from_hf({**data, "no_rope_layers": [1, 1]})
    assert count(with_rope).unidentified == 40


@pytest.mark.parametrize("cls, kw, layers", [
    # SmolLM3's default: every 4th layer NoPE
    ("SmolLM3Config", dict(SMALL, num_hidden_layers=8), [(6, 40), (2, 64)]),
    # Cohere2 / EXAONE 4: RoPE only on the sliding layers (EXAONE 4 with gains: 40 and 42)
    ("Cohere2Config", dict(SMALL, head_dim=4, num_hidden_layers=4), [(3, 40), (1, 64)]),
    ("Exaone4Config", dict(SMALL, head_dim=4, num_hidden_layers=4), [(3, 40), (1, 42)]),
    # Llama 4: L2 QK-norm on the RoPE layers, none on the NoPE layers
    ("Llama4TextConfig", dict(SMALL, head_dim=4, num_hidden_layers=4), [(3, 42), (1, 64)]),
    # Qwen3-Next: one full (gated) layer in four; the others are linear attention
    ("Qwen3NextConfig", dict(SMALL, head_dim=8, num_hidden_layers=4), [(1, 29)]),
    # gpt-oss: sliding and full layers are one type
    ("GptOssConfig", dict(SMALL, head_dim=4, num_hidden_layers=4), [(4, 40)]),
], ids=lambda x: x if isinstance(x, str) else None)
def test_models_whose_layers_differ_are_counted_by_type(cls, kw, layers):
    model = model_from_hf(t5dict(cls, **kw))
    mc = count_model(model)
    assert [(len(t.layers), c.unidentified) for t, c in mc.counts] == layers
    assert mc.unidentified == sum(n * u for n, u in layers)
    assert mc.counted_layers == sum(n for n, _ in layers)


def test_qwen3_next_linear_layers_are_named_not_counted():
    model = model_from_hf(t5dict("Qwen3NextConfig", **SMALL, head_dim=8, num_hidden_layers=8))
    skipped = [t for t in model.types if t.config is None]
    assert len(skipped) == 1 and skipped[0].layers == (0, 1, 2, 4, 5, 6)
    assert skipped[0].reason.startswith("linear attention (Gated DeltaNet), not softmax attention")
    assert config_from_hf(t5dict("Qwen3NextConfig", **SMALL, head_dim=8)).output_gate


def test_window_settings_decide_rope_per_layer():
    """Cohere2Attention rotates only when the layer is sliding AND sliding_window is set; EXAONE 4
    rotates every layer when sliding_window is unset."""
    data = t5dict("Cohere2Config", **SMALL, head_dim=4, num_hidden_layers=4)
    assert {t.config.rotary_dim for t in model_from_hf({**data, "sliding_window": None}).counted} == {0}
    ex = t5dict("Exaone4Config", **SMALL, head_dim=4, num_hidden_layers=4)
    assert [t.config.rotary_dim for t in model_from_hf({**ex, "sliding_window": None}).counted] == [4]


def test_a_layer_list_of_the_wrong_length_or_kind_is_refused():
    data = t5dict("SmolLM3Config", **SMALL, num_hidden_layers=4)
    with pytest.raises(ConfigError, match=re.escape("field 'no_rope_layers' must be a list of 4 entries")):
        model_from_hf({**data, "no_rope_layers": [1, 0]})
    with pytest.raises(ConfigError, match="field 'no_rope_layers' must hold 0 or 1 per layer"):
        model_from_hf({**data, "no_rope_layers": [1, 2, 1, 1]})
    co = t5dict("Cohere2Config", **SMALL, head_dim=4, num_hidden_layers=2)
    with pytest.raises(ConfigError, match="field 'layer_types' holds 'linear_attention': this family's "
                                          "layers are sliding_attention, full_attention"):
        model_from_hf({**co, "layer_types": ["sliding_attention", "linear_attention"]})


@pytest.mark.parametrize("cls, kw, family", [
    ("Cohere2Config", dict(SMALL, head_dim=4), "cohere"),
    ("Exaone4Config", dict(SMALL, head_dim=4), "llama"),
    ("GptOssConfig", dict(SMALL, head_dim=4), "llama"),
    ("BloomConfig", dict(hidden_size=16, n_head=4), "falcon"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_family_never_reads_a_known_model_type_as_another(cls, kw, family):
    data = t5dict(cls, **kw)
    with pytest.raises(ConfigError, match=re.escape(f"model_type {data['model_type']!r} is a family the "
                                                    f"reader knows; it is read as itself, never as "
                                                    f"family {family!r} (drop --family)")):
        config_from_hf(data, family=family)


@pytest.mark.parametrize("field, value", [
    ("layer_types", ["full_attention"]), ("no_rope_layers", [0]), ("alibi", True),
    ("use_bias", True), ("use_qk_norm", True), ("attention_sinks", True), ("output_gate", True),
])
def test_family_refuses_a_structure_field_it_does_not_read(field, value):
    """An unknown model_type read with --family: a field that could change the layer and that
    the named family does not read is refused, named as the file writes it."""
    data = {"model_type": "my_model", "hidden_size": 16, "num_attention_heads": 4,
            "num_hidden_layers": 1, field: value}
    with pytest.raises(ConfigError, match=re.escape(f"field {field!r}")):
        config_from_hf(data, family="llama")


def test_count_config_prints_each_layer_type_and_the_model_total(tmp_path, capsys):
    path = tmp_path / "cohere2.json"
    path.write_text(json.dumps(t5dict("Cohere2Config", **SMALL, head_dim=4, num_hidden_layers=4)))
    assert main(["count", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "layers 0-2 (3 layers): AttentionConfig(d_model=16" in out
    assert "layers 3 (1 layer): AttentionConfig(d_model=16" in out
    assert out.rstrip().endswith("model: 4 layers, 3,072 parameters, 184 unidentified (share 5.99%)")
    assert main(["count", "--config", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["total"], report["unidentified"], report["n_layers"]) == (3072, 184, 4)
    assert [(t["layers"], t["unidentified"]) for t in report["layer_types"]] == [([0, 1, 2], 40), ([3], 64)]


def test_count_config_of_a_uniform_model_adds_the_model_total(tmp_path, capsys):
    path = tmp_path / "llama.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 16, "num_attention_heads": 4,
                                "num_hidden_layers": 3}))
    assert main(["count", "--config", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # per head: the RoPE commutant of 2 planes (4) and GL(4) on VO (16)
    assert report["unidentified"] == 4 * (4 + 16) and report["model"]["unidentified"] == 3 * 80
    assert main(["count", "--config", str(path)]) == 0
    assert capsys.readouterr().out.rstrip().endswith(
        "model: 3 layers, 3,072 parameters, 240 unidentified (share 7.81%)")


def test_every_family_row_answers_its_layers():
    """Each family row's per-layer reader, on its own config class's defaults, gives layer types
    whose layers cover the model once."""
    for name, fam in FAMILIES.items():
        if fam.layers is None or fam.latent:
            continue
        cls = transformers.CONFIG_MAPPING[name]
        model = model_from_hf(cls(**SMALL, num_hidden_layers=8).to_dict()
                              if "head_dim" not in cls().to_dict() else
                              cls(**SMALL, head_dim=8, num_hidden_layers=8).to_dict())
        covered = sorted(i for t in model.types for i in t.layers)
        assert covered == list(range(model.n_layers)), name
