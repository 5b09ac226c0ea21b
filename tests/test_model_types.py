"""Every model type of transformers 5.23 (idlib/data/model_types.json): read as a family, or
refused with the reason (the mechanism not derived, no text attention, no reader row yet)."""
from __future__ import annotations

import re
import warnings

import pytest
import transformers

from idlib.config import ConfigError
from idlib.hf import ALIASES, FAMILIES, MODEL_TYPES, config_from_hf, unread_reason


def test_every_model_type_of_transformers_is_in_the_table():
    assert sorted(transformers.CONFIG_MAPPING.keys()) == sorted(MODEL_TYPES)
    assert {mt for mt, r in MODEL_TYPES.items() if r["kind"] == "read"} == \
        set(FAMILIES) & set(MODEL_TYPES)
    assert set(ALIASES.values()) <= set(FAMILIES)
    assert {r["kind"] for r in MODEL_TYPES.values()} == {"read", "same_as", "derivable", "refused", "none"}
    assert all(r.get("why") for r in MODEL_TYPES.values() if r["kind"] in ("derivable", "refused", "none"))


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
    ("csm", "has no reader row of its own (its attention: llama code; kv default 8"),
    ("qwen3_5_text", "--family qwen3"),
])
def test_what_is_not_read_says_why(model_type, words):
    with pytest.raises(ConfigError) as e:
        config_from_hf({"model_type": model_type, "hidden_size": 64, "num_attention_heads": 4})
    assert words in str(e.value)
    assert str(e.value) == f"config: {unread_reason(model_type)}"
    assert "\n" not in str(e.value)
