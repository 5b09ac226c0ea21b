"""AttentionConfig.from_hf / from_file on Hugging Face config.json files (tests/data/)."""
import json
import re
from pathlib import Path

import pytest

from idlib.config import AttentionConfig, ConfigError

DATA = Path(__file__).parent / "data"

# file -> the one attention layer it describes
EXPECTED = {
    "gpt2.json": dict(d_model=768, n_heads=12, bias="qkvo", causal=True),          # learned positions
    "llama3_8b.json": dict(d_model=4096, n_heads=32, n_kv_heads=8, rope_fraction=1.0,
                           rope_base=500000.0, causal=True),
    "qwen2_5_7b.json": dict(d_model=3584, n_heads=28, n_kv_heads=4, rope_fraction=1.0,
                            rope_base=1e6, bias="qkv", causal=True),       # Qwen2: q, k, v biases
    "qwen_qkv_bias.json": dict(d_model=896, n_heads=14, n_kv_heads=2, rope_fraction=1.0,
                               rope_base=1e6, bias="qkv", causal=True),    # explicit qkv_bias
    "phi2.json": dict(d_model=2560, n_heads=32, rope_fraction=0.4, bias="qkvo", causal=True),
    "pythia_1b.json": dict(d_model=2048, n_heads=8, rope_fraction=0.25, bias="qkvo", causal=True),
    "mistral_7b.json": dict(d_model=4096, n_heads=32, n_kv_heads=8, rope_fraction=1.0,
                            rope_base=1e6, causal=True),
    "falcon_7b.json": dict(d_model=4544, n_heads=71, n_kv_heads=1, head_dim=64, rope_fraction=1.0,
                           causal=True),                                   # multi_query, bias false
    "bert_base.json": dict(d_model=768, n_heads=12, bias="qkvo", causal=False),    # an encoder
    "small_gqa.json": dict(d_model=8, n_heads=4, n_kv_heads=2, rope_fraction=1.0, bias="qkv",
                           causal=True),                                   # AttentionConfig fields
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_from_file(name):
    assert AttentionConfig.from_file(DATA / name) == AttentionConfig(**EXPECTED[name])


@pytest.mark.parametrize("name", sorted(set(EXPECTED) - {"small_gqa.json"}))
def test_from_hf_path_and_dict_agree(name):
    path = DATA / name
    assert AttentionConfig.from_hf(path) == AttentionConfig.from_hf(json.loads(path.read_text())) \
        == AttentionConfig(**EXPECTED[name])


def test_derived_sizes_of_real_models():
    llama = AttentionConfig.from_file(DATA / "llama3_8b.json")
    assert (llama.head_dim, llama.value_dim, llama.group_size, llama.rotary_dim) == (128, 128, 4, 128)
    phi = AttentionConfig.from_file(DATA / "phi2.json")
    assert (phi.head_dim, phi.rotary_dim) == (80, 32)
    neox = AttentionConfig.from_file(DATA / "pythia_1b.json")
    assert (neox.head_dim, neox.rotary_dim) == (256, 64)


def test_text_config_is_read():
    inner = json.loads((DATA / "mistral_7b.json").read_text())
    assert AttentionConfig.from_hf({"model_type": "llava", "text_config": inner}) == \
        AttentionConfig(**EXPECTED["mistral_7b.json"])


def test_explicit_head_dim_and_bias_flags():
    base = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}
    assert AttentionConfig.from_hf({**base, "head_dim": 8}).head_dim == 8
    assert AttentionConfig.from_hf({**base, "attention_bias": True}).bias == "qkvo"
    assert AttentionConfig.from_hf({**base, "attention_bias": False}).bias == ""
    assert AttentionConfig.from_hf({**base, "qkv_bias": True}).bias == "qkv"
    assert AttentionConfig.from_hf({"model_type": "gpt2", "n_embd": 64, "n_head": 4}).rope_fraction == 0.0


@pytest.mark.parametrize("name, message", [
    ("bloom_alibi.json", "bloom_alibi.json: ALiBi position biases are not represented by AttentionConfig"),
    ("mpt_alibi.json", "mpt_alibi.json: ALiBi position biases are not represented"),
    ("deepseek_v2_lite.json", "deepseek_v2_lite.json: latent K/V attention (kv_lora_rank) is not represented"),
    ("malformed.json", "config file 'malformed.json': not valid JSON (line 5, column 1"),
    ("unknown_field.json", "unknown_field.json: unknown field 'heads_per_group'"),
    ("no_positions.json", "no_positions.json: cannot tell whether the model uses rotary or learned positions"),
])
def test_refusals(name, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        AttentionConfig.from_file(DATA / name)


@pytest.mark.parametrize("data, message", [
    ({"model_type": "llama", "num_attention_heads": 4}, "field 'hidden_size' is required"),
    ({"model_type": "llama", "hidden_size": 64}, "field 'num_attention_heads' is required"),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 5},
     "d_model=64 must be divisible by n_heads=5"),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "partial_rotary_factor": 0.3},
     "rope_fraction=0.3 times head_dim=16 = 4.8 must be an even integer"),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 3},
     "n_heads=8 must be divisible by n_kv_heads=3"),
])
def test_hf_values_are_validated(data, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        AttentionConfig.from_hf(data)


@pytest.mark.parametrize("data, message", [
    ({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2,
      "partial_rotary_factor": "abc"}, "field 'partial_rotary_factor'='abc' must be a number"),
    ({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "rope_theta": "x"},
     "field 'rope_theta'='x' must be a number"),
    ({"text_config": 5}, "field 'text_config' must be a JSON object"),
    ({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "attention_bias": "yes"},
     "field 'attention_bias'='yes' must be true or false"),
], ids=str)
def test_malformed_hf_fields_are_refused_by_name(data, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        AttentionConfig.from_hf(data)


def test_non_utf8_config_file_is_refused(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"d_model": 8, "bias": "\xe9"}')
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        AttentionConfig.from_file(path)
