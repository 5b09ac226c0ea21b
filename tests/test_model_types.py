"""Every model type of transformers 5.23 (idlib/data/model_types.json): read as a family (its own,
the same code and fields as one, or a family's code with its own config defaults:
tests/test_model_types_real.py checks those against their real modules), or refused with the
reason (the mechanism or structure not derived, no text attention)."""
from __future__ import annotations

import re
import warnings

import pytest
import transformers

from idlib.config import ConfigError
from idlib.hf import ALIASES, FAMILIES, MODEL_TYPES, OWN_DEFAULTS, config_from_hf, model_from_hf, unread_reason
from idlib.studies import model_types as study


def test_every_model_type_of_transformers_is_in_the_table():
    assert sorted(transformers.CONFIG_MAPPING.keys()) == sorted(MODEL_TYPES)
    assert {mt for mt, r in MODEL_TYPES.items() if r["kind"] == "read"} == \
        set(FAMILIES) & set(MODEL_TYPES)
    assert set(ALIASES.values()) <= set(FAMILIES)
    assert {r["kind"] for r in MODEL_TYPES.values()} == {"read", "same_as", "own_defaults", "refused", "none"}
    assert all(r.get("why") for r in MODEL_TYPES.values() if r["kind"] in ("own_defaults", "refused", "none"))
    assert set(OWN_DEFAULTS) == {mt for mt, r in MODEL_TYPES.items() if r["kind"] == "own_defaults"}
    assert {r["family"] for r in MODEL_TYPES.values() if r["kind"] == "own_defaults"} <= set(FAMILIES)


def test_the_counts_per_kind():
    """The survey's counts (the book's page prints them from the data; a change shows here)."""
    assert study.counts() == {"read": 55, "same_as": 33, "own_defaults": 114, "refused": 112, "none": 490,
                              "all": 804, "read in all": 202}
    assert sum(int(n) for _, n in study.kind_counts()[:-1]) == int(study.kind_counts()[-1][1]) == 804
    assert len(study.own_rows()) == 114 and len(study.reason_rows("refused")) == 112


@pytest.mark.parametrize("model_type, family, expected", [
    ("csm", "llama", dict(n_kv_heads=8, head_dim=8, rope_base=500000.0, bias="")),
    ("cosmos3_edge_text", "llama", dict(n_kv_heads=8, head_dim=128, rope_base=1e8)),
    ("jais2", "llama", dict(n_kv_heads=64, bias="qkvo")),
    ("solar_open", "llama", dict(n_kv_heads=8, head_dim=128)),
    ("eurobert", "llama", dict(causal=False)),
])
def test_a_model_type_read_with_its_own_defaults(model_type, family, expected):
    """The sizes alone: every other field is its own config class's default, not the family's."""
    data = {"model_type": model_type, "hidden_size": 512, "num_attention_heads": 64}
    mine = model_from_hf(data).counted[0].config
    theirs = model_from_hf({**data, "model_type": family}).counted[0].config
    assert {k: getattr(mine, k) for k in expected} == expected
    assert mine != theirs or model_type == "eurobert"


def test_family_never_reads_a_model_type_read_with_its_own_defaults():
    with pytest.raises(ConfigError, match="drop --family"):
        config_from_hf({"model_type": "csm", "hidden_size": 64, "num_attention_heads": 4}, family="llama")


@pytest.mark.parametrize("model_type", sorted(ALIASES))
def test_an_alias_reads_as_its_family(model_type):
    """Same attention code and fields: the alias's own config class and its family's, at the same
    sizes, are read as the same layer."""
    family = ALIASES[model_type]
    kw = dict(hidden_size=64, num_attention_heads=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mine = transformers.CONFIG_MAPPING[model_type](**kw).to_dict()
        theirs = transformers.CONFIG_MAPPING[family](**kw).to_dict()
    try:
        expected = config_from_hf(theirs)
    except ConfigError as e:                       # e.g. a default of 8 key/value heads for 4 heads
        with pytest.raises(ConfigError, match=re.escape(str(e))):
            config_from_hf(mine)
        return
    assert config_from_hf(mine) == expected


@pytest.mark.parametrize("model_type, words", [
    ("deepseek_v32", "its attention is not derived (DSA lightning indexer"),
    ("diffllama", "its attention is not derived"),
    ("mamba", "has no text softmax attention layer"),
    ("vit", "has no text softmax attention layer"),
    ("bart", "its attention is not derived (encoder-decoder"),
    ("hrm_text", "two stacks (H_module and L_module)"),
])
def test_what_is_not_read_says_why(model_type, words):
    with pytest.raises(ConfigError) as e:
        config_from_hf({"model_type": model_type, "hidden_size": 64, "num_attention_heads": 4})
    assert words in str(e.value)
    assert str(e.value) == f"config: {unread_reason(model_type)}"
    assert "\n" not in str(e.value)
