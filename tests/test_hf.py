"""idlib.hf: Hugging Face configs in the transformers 5 layout (made by transformers' own config
classes, ``to_dict()``, no network) and in the older layouts (tests/data/, hand-written dicts)."""
import json
import re
from pathlib import Path

import pytest
import transformers

from idlib.config import AttentionConfig, ConfigError, LatentAttentionConfig
from idlib.counting import count
from idlib.hf import FAMILIES, HARMLESS, config_from_file, config_from_hf, family_table, ignored_fields

DATA = Path(__file__).parent / "data"
LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}

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
    assert config_from_file(DATA / name) == AttentionConfig(**EXPECTED[name])


@pytest.mark.parametrize("name", sorted(set(EXPECTED) - {"small_gqa.json"}))
def test_from_hf_path_and_dict_agree(name):
    path = DATA / name
    assert config_from_hf(path) == config_from_hf(json.loads(path.read_text())) \
        == AttentionConfig(**EXPECTED[name])


def test_derived_sizes_of_real_models():
    llama = config_from_file(DATA / "llama3_8b.json")
    assert (llama.head_dim, llama.value_dim, llama.group_size, llama.rotary_dim) == (128, 128, 4, 128)
    phi = config_from_file(DATA / "phi2.json")
    assert (phi.head_dim, phi.rotary_dim) == (80, 32)
    neox = config_from_file(DATA / "pythia_1b.json")
    assert (neox.head_dim, neox.rotary_dim) == (256, 64)


# -- the transformers 5 layout, written by transformers' own config classes ---------------------

def t5dict(cls: str, **kw) -> dict:
    transformers = pytest.importorskip("transformers")
    return getattr(transformers, cls)(**kw).to_dict()


def unid(data: dict) -> int:
    return count(config_from_hf(data)).unidentified


def test_phi2_partial_rope_in_rope_parameters():
    data = t5dict("PhiConfig", hidden_size=2560, num_attention_heads=32,
                  rope_parameters={"rope_theta": 10000.0, "partial_rotary_factor": 0.4})
    assert "partial_rotary_factor" not in data and data["rope_parameters"]["partial_rotary_factor"] == 0.4
    c = config_from_hf(data)
    assert (c.head_dim, c.rotary_dim, c.bias) == (80, 32, "qkvo")
    assert count(c).unidentified == 283_648          # 209,920 if read as full RoPE


def test_gpt_neox_and_stablelm_partial_rope():
    # StableLM with q, k, v biases, d 4096, 32 heads of 128, a quarter rotated: per head the RoPE
    # commutant 2 * 16 + 96^2, GL(128) on VO, 96 pass-through key-bias dims: 823,296 (528,384 if
    # read as full RoPE); GPT-NeoX also biases the output, so the value bias adds d = 4,096
    data = t5dict("StableLmConfig", hidden_size=4096, num_attention_heads=32, use_qkv_bias=True)
    assert config_from_hf(data).rotary_dim == 32 and unid(data) == 823_296
    assert unid({**data, "rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 1.0}}) == 528_384
    neox = t5dict("GPTNeoXConfig", hidden_size=4096, num_attention_heads=32)
    assert config_from_hf(neox).bias == "qkvo" and unid(neox) == 823_296 + 4096


def test_stablelm_partial_rope_and_qkv_bias():
    data = t5dict("StableLmConfig", hidden_size=2048, num_attention_heads=32, num_key_value_heads=32,
                  use_qkv_bias=True)
    c = config_from_hf(data)
    assert (c.rotary_dim, c.bias) == (16, "qkv")
    assert count(c).total == 4 * 2048 * 2048 + 6_144
    no_bias = config_from_hf(t5dict("StableLmConfig", hidden_size=2048, num_attention_heads=32))
    assert count(no_bias).total == 4 * 2048 * 2048


def test_gptj_rotary_dim():
    data = t5dict("GPTJConfig", n_embd=4096, n_head=16, rotary_dim=64)
    c = config_from_hf(data)
    assert (c.head_dim, c.rotary_dim, c.bias) == (256, 64, "")
    assert count(c).unidentified == 1_639_424        # 1,052,672 if read as full RoPE
    assert config_from_hf({**data, "rotary_dim": None}).rotary_dim == 256   # null: every dim


def test_t5_d_kv():
    data = t5dict("T5Config", d_model=1024, d_kv=128, num_heads=32)
    c = config_from_hf(data)
    assert (c.head_dim, c.rotary_dim, c.causal) == (128, 0, False)
    assert count(c).total == 16_777_216              # 4,194,304 if head_dim = d / H = 32


def test_glm_bias_is_qkv_only():
    data = t5dict("GlmConfig", hidden_size=512, num_attention_heads=8, num_key_value_heads=2, head_dim=64)
    c = config_from_hf(data)
    assert (c.bias, c.rotary_dim, c.n_kv_heads) == ("qkv", 32, 2)


def test_qwen2_vl_text_config_always_biased():
    data = t5dict("Qwen2VLConfig", text_config={"hidden_size": 512, "num_attention_heads": 8,
                                                "num_key_value_heads": 2})
    c = config_from_hf(data)
    assert (c.d_model, c.n_kv_heads, c.bias, c.rotary_dim) == (512, 2, "qkv", 64)


def test_gemma3_text_config_without_model_type_keeps_qk_norm():
    inner = {"hidden_size": 2560, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256}
    data = {"model_type": "gemma3", "text_config": inner}
    c = config_from_hf(data)
    assert c.qk_norm == "gain" and count(c).unidentified == 262_284   # 263,168 without QK-norm
    assert config_from_hf(t5dict("Gemma3Config", text_config=inner)) == c


def test_text_config_without_kv_heads_takes_the_family_default():
    # Gemma3TextConfig's default is 4 key/value heads; Llama's is one per query head
    c = config_from_hf({"model_type": "gemma3", "text_config": {"hidden_size": 512,
                                                                 "num_attention_heads": 8}})
    assert (c.n_kv_heads, c.head_dim) == (4, 256)
    assert config_from_hf(t5dict("Gemma3Config", text_config={"hidden_size": 512,
                                                              "num_attention_heads": 8})) == c
    inner = json.loads((DATA / "mistral_7b.json").read_text())
    assert config_from_hf({"model_type": "llava", "text_config": inner}) == \
        AttentionConfig(**EXPECTED["mistral_7b.json"])
    del inner["num_key_value_heads"]
    assert config_from_hf({"model_type": "mistral3", "text_config": inner}).n_kv_heads == 8


@pytest.mark.parametrize("cls, kw, expected", [
    ("LlamaConfig", dict(hidden_size=256, num_attention_heads=4, attention_bias=True),
     dict(n_kv_heads=4, head_dim=64, bias="qkvo", rope_fraction=1.0)),
    ("MistralConfig", dict(hidden_size=256, num_attention_heads=16), dict(n_kv_heads=8, bias="")),
    ("Qwen2Config", dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2),
     dict(bias="qkv")),
    ("Qwen2MoeConfig", dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2),
     dict(bias="qkv")),
    ("Qwen3Config", dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32),
     dict(qk_norm="gain", head_dim=32)),
    ("Gemma2Config", dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32),
     dict(n_kv_heads=2, bias="")),
    ("Phi3Config", dict(hidden_size=256, num_attention_heads=4), dict(bias="", rope_fraction=1.0)),
    ("FalconConfig", dict(hidden_size=256, num_attention_heads=4), dict(n_kv_heads=1, bias="")),
    ("FalconConfig", dict(hidden_size=256, num_attention_heads=4, new_decoder_architecture=True,
                          num_kv_heads=2, bias=True), dict(n_kv_heads=2, bias="qkvo")),
    ("OlmoConfig", dict(hidden_size=256, num_attention_heads=4), dict(bias="")),
    ("CohereConfig", dict(hidden_size=256, num_attention_heads=4), dict(rope_base=500000.0)),
    ("Starcoder2Config", dict(hidden_size=256, num_attention_heads=4), dict(n_kv_heads=2, bias="qkvo")),
    ("GPT2Config", dict(n_embd=256, n_head=4), dict(bias="qkvo", rope_fraction=0.0)),
    ("BertConfig", dict(hidden_size=256, num_attention_heads=4), dict(bias="qkvo", causal=False)),
    ("BertConfig", dict(hidden_size=256, num_attention_heads=4, is_decoder=True), dict(causal=True)),
    ("OPTConfig", dict(hidden_size=256, num_attention_heads=4), dict(bias="qkvo", rope_fraction=0.0)),
    ("GPTNeoConfig", dict(hidden_size=256, num_heads=4), dict(bias="o", rope_fraction=0.0)),
    ("PersimmonConfig", dict(hidden_size=256, num_attention_heads=4, qk_layernorm=False),
     dict(bias="qkvo", rope_fraction=0.5)),
    ("GraniteConfig", dict(hidden_size=256, num_attention_heads=4), dict(bias="")),
], ids=lambda x: x if isinstance(x, str) else None)
def test_transformers_defaults_are_the_families_defaults(cls, kw, expected):
    c = config_from_hf(t5dict(cls, **kw))
    for key, value in expected.items():
        assert getattr(c, key) == value, key


def test_gemma3_local_and_global_bases_give_one_count():
    data = t5dict("Gemma3TextConfig", hidden_size=512, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=64)
    assert set(data["rope_parameters"]) == {"sliding_attention", "full_attention"}
    c = config_from_hf(data)
    assert c.qk_norm == "gain" and c.rope_base in (1e4, 1e6)


# -- the older layouts, by hand ----------------------------------------------------------------

@pytest.mark.parametrize("data, expected", [
    ({"model_type": "phi", "hidden_size": 2560, "num_attention_heads": 32, "partial_rotary_factor": 0.4},
     dict(rotary_dim=32)),
    ({"model_type": "gpt_neox", "hidden_size": 2048, "num_attention_heads": 8, "rotary_pct": 0.25,
      "rotary_emb_base": 10000}, dict(rotary_dim=64)),
    ({"model_type": "phi", "hidden_size": 2560, "num_attention_heads": 32}, dict(rotary_dim=40)),
    ({"model_type": "stablelm", "hidden_size": 2048, "num_attention_heads": 32, "use_qkv_bias": True,
      "partial_rotary_factor": 0.25}, dict(bias="qkv", rotary_dim=16)),
    ({"model_type": "glm", "hidden_size": 512, "num_attention_heads": 8, "head_dim": 64,
      "attention_bias": True}, dict(bias="qkv", n_kv_heads=2)),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "rope_theta": 5e5,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, dict(rope_base=5e5)),
    ({"model_type": "mistral", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
      "sliding_window": 4096}, dict(n_kv_heads=2)),
    ({"model_type": "gemma2", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
      "head_dim": 16, "attn_logit_softcapping": 50.0}, dict(bias="")),
], ids=lambda x: x.get("model_type") if isinstance(x, dict) and "model_type" in x else None)
def test_old_layouts(data, expected):
    c = config_from_hf(data)
    for key, value in expected.items():
        assert getattr(c, key) == value, key


def test_explicit_head_dim_and_bias_flags():
    base = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}
    assert config_from_hf({**base, "head_dim": 8}).head_dim == 8
    assert config_from_hf({**base, "attention_bias": True}).bias == "qkvo"
    assert config_from_hf({**base, "attention_bias": False}).bias == ""
    assert config_from_hf({"model_type": "gpt2", "n_embd": 64, "n_head": 4}).rope_fraction == 0.0


def test_gemma2_soft_capping_is_read():
    """Capped scores see row constants, so a key bias is identified (issue 14: d 6, 2 heads,
    biases q, k, v, o, cap 50: identified 126, not the uncapped 120)."""
    data = t5dict("Gemma2Config", hidden_size=6, num_attention_heads=2, num_key_value_heads=2,
                  head_dim=3, attention_bias=True)
    data["rope_parameters"] = {"rope_theta": 1e4, "rope_type": "default"}
    unrotated = {**data, "head_dim": 4, "rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.0}}
    assert config_from_hf(unrotated).rotary_dim == 4       # its code rotates every dimension: the
    assert ignored_fields(unrotated) == ["rope_parameters.partial_rotary_factor"]    # share is listed
    c = config_from_hf({**data, "head_dim": 4})
    assert (c.softcap, c.bias, c.rotary_dim) == (50.0, "qkvo", 4)
    assert config_from_hf({**data, "head_dim": 4, "attn_logit_softcapping": None}).softcap is None
    # without RoPE (idlib's own layer; Gemma 2's code always rotates): 126 capped, 120 not
    capped = c.replace(head_dim=3, rope_fraction=0.0)
    assert count(capped).identified == 126 and count(capped.replace(softcap=None)).identified == 120


def test_olmo2_whole_projection_qk_norm():
    data = t5dict("Olmo2Config", hidden_size=4096, num_attention_heads=32)
    c = config_from_hf(data)
    assert c.qk_norm == "whole" and count(c).unidentified == 2 + 32 * (64 + 128 ** 2)
    wide = config_from_hf({**data, "head_dim": 256})
    with pytest.raises(ConfigError, match=re.escape("n_heads * head_dim = 8192 at most d_model = 4096")):
        count(wide)


@pytest.mark.parametrize("data, qk_norm", [
    ({**LLAMA, "model_type": "stablelm", "num_key_value_heads": 4, "qk_layernorm": True,
      "partial_rotary_factor": 0.25}, "layernorm"),
    ({**LLAMA, "model_type": "cohere", "use_qk_norm": True}, "layernorm"),
    ({**LLAMA, "model_type": "phi", "qk_layernorm": True}, "layernorm_shared"),
    ({**LLAMA, "model_type": "persimmon"}, "layernorm_shared"),
    ({**LLAMA, "model_type": "persimmon", "qk_layernorm": False}, "none"),
], ids=lambda x: x.get("model_type") if isinstance(x, dict) else x)
def test_qk_layernorm_is_read(data, qk_norm):
    assert config_from_hf(data).qk_norm == qk_norm


def test_family_override():
    data = {"model_type": "my_llama", "hidden_size": 64, "num_attention_heads": 4, "rope_theta": 1e4}
    with pytest.raises(ConfigError, match=re.escape("model_type 'my_llama' is not a family the reader "
                                                    "knows; the attention function is never guessed")):
        config_from_hf(data)
    assert config_from_hf(data, family="llama") == AttentionConfig(d_model=64, n_heads=4,
                                                                   rope_fraction=1.0, causal=True)
    assert config_from_hf({"hidden_size": 64, "num_attention_heads": 4}, family="gpt2").bias == "qkvo"
    with pytest.raises(ConfigError, match="family='llamma' is not a known family"):
        config_from_hf(data, family="llamma")


def test_family_table_lists_every_family():
    rows = family_table()
    assert [r["model_type"] for r in rows] == sorted(FAMILIES)
    assert {r["model_type"]: r["biases"] for r in rows}["glm"] == "none; attention_bias -> qkv"
    assert all(HARMLESS[k] for k in HARMLESS)


# -- refusals ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, message", [
    ("mpt_alibi.json", "mpt_alibi.json: model_type 'custom' is not a family the reader knows"),
    ("malformed.json", "config file 'malformed.json': not valid JSON (line 5, column 1"),
    ("unknown_field.json", "unknown_field.json: unknown field 'heads_per_group'"),
    ("no_positions.json", "no_positions.json: model_type 'mystery' is not a family the reader knows"),
])
def test_refusals(name, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        config_from_file(DATA / name)


@pytest.mark.parametrize("data, message", [
    ({**LLAMA, "model_type": "bert", "position_embedding_type": "relative_key"},
     "field 'position_embedding_type'='relative_key': relative position scores are not represented"),
    ({**LLAMA, "alibi": True}, "ALiBi position biases (field 'alibi') are not read for this family "
                               "(families with ALiBi: bloom, falcon, mpt)"),
    ({**LLAMA, "model_type": "olmo", "clip_qkv": 8.0}, "field 'clip_qkv'=8.0 clamps q, k, v"),
    ({**LLAMA, "model_type": "olmoe", "clip_qkv": 8.0}, "field 'clip_qkv'=8.0 clamps q, k, v"),
    ({**LLAMA, "model_type": "smollm3"}, "its layers differ (2 types: layers 0-2, 4-6, 8-10, ..., 32-34 "
                                         "(27 layers): d=64 H=4 G=4 k=16 v=16 r=16 causal; layers 3, 7, "
                                         "11, ..., 35 (9 layers): d=64 H=4 G=4 k=16 v=16 causal); count "
                                         "the whole model"),
    ({**LLAMA, "attn_temperature": 2.0}, "field 'attn_temperature' is not read for this family and "
                                         "could change the attention function; it is refused"),
    ({**LLAMA, "sliding_window": 1}, "field 'sliding_window'=1 leaves each token only itself"),
    ({**LLAMA, "model_type": "phi3", "rope_parameters": {
        "full_attention": {"rope_theta": 1e4, "partial_rotary_factor": 0.5},
        "sliding_attention": {"rope_theta": 1e4}}}, None),
    ({"model_type": "llama", "num_attention_heads": 4}, "field 'hidden_size' is required"),
    ({"model_type": "llama", "hidden_size": 64}, "field 'num_attention_heads' is required"),
    ({**LLAMA, "num_attention_heads": 5}, "hidden_size=64 must be divisible by num_attention_heads=5 when head_dim is not given"),
    ({**LLAMA, "model_type": "phi", "partial_rotary_factor": 0.3},
     "rope_fraction=0.3 times head_dim=16 = 4.8 must be an even"),
    ({**LLAMA, "model_type": "gpt_oss", "partial_rotary_factor": 0.5},
     "partial_rotary_factor=0.5: this family's rotary code rotates whole heads and breaks on a share"),
    ({**LLAMA, "model_type": "phi3", "partial_rotary_factor": None},
     "field 'partial_rotary_factor' is null, which this family's transformers code does not accept"),
    ({**LLAMA, "model_type": "helium", "head_dim": 8},
     "num_attention_heads x head_dim = 4 x 8 must equal hidden_size=64"),
    ({**LLAMA, "model_type": "codegen", "num_attention_heads": 2},
     "num_attention_heads=2 must be a multiple of 4"),
    ({**LLAMA, "model_type": "stablelm", "head_dim": 8},
     "field 'head_dim'=8 must equal hidden_size / num_attention_heads = 16"),
    ({**LLAMA, "num_attention_heads": 8, "num_key_value_heads": 3},
     "num_attention_heads=8 must be divisible by num_key_value_heads=3"),
    ({**LLAMA, "partial_rotary_factor": "abc"}, "field 'partial_rotary_factor'='abc' must be a finite number"),
    ({**LLAMA, "rope_theta": "x"}, "field 'rope_theta'='x' must be a finite number"),
    ({**LLAMA, "attention_bias": "yes"}, "field 'attention_bias'='yes' must be true or false"),
    ({**LLAMA, "hidden_size": 64.5}, "field 'hidden_size'=64.5 must be an integer"),
    ({"text_config": 5}, "field 'text_config' must be a JSON object (got int)"),
    ({"model_type": "gemma3", "text_config": [1, 2]}, "field 'text_config' must be a JSON object (got list)"),
    ({"model_type": "gemma3", "text_config": None}, "field 'text_config' must be a JSON object (got NoneType)"),
    ({"model_type": "gemma3", "text_config": "x"}, "field 'text_config' must be a JSON object (got str)"),
    ([1], "a Hugging Face config must be a JSON object"),
], ids=str)
def test_refused_with_the_rule_named(data, message):
    if message is None:     # one share per layer type: read; two different shares: refused
        assert config_from_hf(data).rotary_dim == 8
        data = {**data, "rope_parameters": {"a": {"partial_rotary_factor": 0.5},
                                            "b": {"partial_rotary_factor": 0.25}}}
        message = "layer types rotate different shares [0.25, 0.5]"
    with pytest.raises(ConfigError, match=re.escape(message)):
        config_from_hf(data)


def test_latent_attention_is_read_exactly():
    """DeepSeek-V2-Lite as shipped (older layout: rope_theta at the top, q_lora_rank null)."""
    base = json.loads((DATA / "deepseek_v2_lite.json").read_text())
    assert config_from_hf(base) == LatentAttentionConfig(
        d_model=2048, n_heads=16, kv_latent=512, nope_dim=128, rope_dim=64, value_dim=128,
        q_latent=None, rope_base=10000.0, bias=False, causal=True)
    assert config_from_file(DATA / "deepseek_v2_lite.json") == config_from_hf(base)


@pytest.mark.parametrize("cls", ["DeepseekV2Config", "DeepseekV3Config"])
def test_latent_attention_in_the_transformers_5_layout(cls):
    """Written by transformers' own config classes: defaults, rope_parameters, yarn scaling."""
    cfg = getattr(transformers, cls)(hidden_size=7168, num_attention_heads=128, q_lora_rank=1536,
                                     attention_bias=True, rope_parameters={
                                         "rope_type": "yarn", "rope_theta": 1e4, "factor": 40.0,
                                         "original_max_position_embeddings": 4096})
    c = config_from_hf(cfg.to_dict())
    assert (c.d_model, c.n_heads, c.kv_latent, c.q_latent, c.nope_dim, c.rope_dim, c.value_dim,
            c.rope_base, c.bias) == (7168, 128, 512, 1536, 128, 64, 128, 1e4, True)
    no_q = config_from_hf(getattr(transformers, cls)(q_lora_rank=None).to_dict())
    assert no_q.q_latent is None and no_q.query_input == no_q.d_model


@pytest.mark.parametrize("change, message", [
    ({"num_attention_heads": None}, "field 'num_attention_heads' is required"),
    ({"kv_lora_rank": 512.7}, "field 'kv_lora_rank'=512.7 must be an integer"),
    ({"qk_rope_head_dim": 63}, "rope_dim=63 must be even"),
    ({"qk_head_dim": 128}, "field 'qk_head_dim'=128 must be 192"),
    ({"head_dim": 128}, "field 'head_dim'=128 must equal qk_rope_head_dim=64"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor=0.5: family 'deepseek_v2' rotates all"),
    ({"attention_bias": "no"}, "field 'attention_bias'='no' must be true or false"),
    ({"kv_head_scale": 2.0}, "field 'kv_head_scale' is not read for this family"),
])
def test_latent_attention_refusals(change, message):
    base = json.loads((DATA / "deepseek_v2_lite.json").read_text())
    data = {k: v for k, v in {**base, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=re.escape(message)):
        config_from_hf(data)


def test_non_utf8_config_file_is_refused(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"d_model": 8, "bias": "\xe9"}')
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        config_from_file(path)


def test_a_rotary_share_the_code_does_not_read_is_listed_not_counted():
    """Llama's code rotates every dimension whatever partial_rotary_factor says; Phi-3 reads the
    share as partial_rotary_factor, GPT-NeoX as rotary_pct: the other spelling is ignored."""
    assert config_from_hf({**LLAMA, "partial_rotary_factor": 0.5}).rotary_dim == 16
    assert ignored_fields({**LLAMA, "partial_rotary_factor": 0.5}) == ["partial_rotary_factor"]
    phi3 = {**LLAMA, "model_type": "phi3"}
    assert config_from_hf({**phi3, "rotary_pct": 0.5}).rotary_dim == 16
    assert ignored_fields({**phi3, "rotary_pct": 0.5}) == ["rotary_pct"]
    assert config_from_hf({**phi3, "partial_rotary_factor": 0.5}).rotary_dim == 8
    neox = {**LLAMA, "model_type": "gpt_neox"}
    assert config_from_hf(neox).rotary_dim == 4                              # default 0.25
    assert config_from_hf({**neox, "partial_rotary_factor": 1.0}).rotary_dim == 4
    assert config_from_hf({**neox, "rotary_pct": 1.0}).rotary_dim == 16
