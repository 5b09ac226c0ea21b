"""idlib.implementations: the transformers modules people run, measured like idlib's own layer."""
import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from idlib import implementations as impl          # noqa: E402
from idlib.config import ConfigError               # noqa: E402
from idlib.counting import count                   # noqa: E402

PARTIAL = {"phi", "gpt_neox", "stablelm", "persimmon", "glm"}
# family -> closed-form identified count I of the small layer d 8, 2 heads of 4 (half rotated
# where the family rotates part of each head), the family's biases switched on
EXPECTED_I = {"llama": 240, "mistral": 216, "mixtral": 216, "qwen2": 240, "qwen2_moe": 240,
              "qwen3": 250, "qwen3_moe": 250, "gemma": 240, "gemma2": 216, "gemma3_text": 250,
              "granite": 240, "olmo": 240, "olmo2": 258, "olmoe": 258, "glm": 232, "starcoder2": 240, "phi3": 216, "phi": 232,
              "stablelm": 232, "persimmon": 232, "gpt_neox": 232, "falcon": 240, "gpt2": 208,
              "bert": 208, "t5": 192}


def layer(family):
    return dict(d=8, H=2, G=2, k=4, rope_fraction=0.5 if family in PARTIAL else 1.0,
                bias=family != "gemma2")


# the families of chapter 9 (chapter 10's, impl.FAMILIES_2026, are tests/test_implementations_2026.py's)
CHAPTER_9 = sorted(f for f, s in impl.SPECS.items() if not s.latent and f not in impl.FAMILIES_2026)


@pytest.mark.parametrize("family", CHAPTER_9)
def test_real_module_agrees_with_the_closed_form(family):
    c = impl.check(family, **layer(family))
    assert c.n_params == c.total == count(c.config).total
    assert c.certified and c.gap >= 1e6
    assert c.rank == c.identified == EXPECTED_I[family]
    assert c.agrees


def test_grouped_heads_and_multi_query():
    c = impl.check("llama", d=8, H=4, G=2, k=2)
    assert (c.config.n_kv_heads, c.rank, c.identified, c.agrees) == (2, 180, 180, True)   # P 192, per group RoPE commutant 2 + GL(2) on VO
    c = impl.check("falcon", d=8, H=4, G=1, k=2)
    assert (c.config.n_kv_heads, c.rank, c.identified, c.agrees) == (1, 154, 154, True)


def test_the_kernel_and_norms_are_the_modules_own():
    """eager64 and RMSNorm64 compute what transformers' own eager attention and norms compute
    (to float32 round-off, where those run)."""
    built = impl.build("qwen3", d=8, H=2, G=1, k=4)
    assert isinstance(built.module.q_norm, impl.RMSNorm64)
    import transformers
    from transformers.models.qwen3 import modeling_qwen3 as mq
    X = impl.inputs(built.config, n_sequences=2)
    ours = impl.forward(built, X)
    built.hf_config._attn_implementation = "eager"
    own = mq.Qwen3Attention(built.hf_config, layer_idx=0).to(torch.float64)
    own.load_state_dict(built.module.state_dict())
    pe = impl.position_embeddings(built.rotary, X, torch.arange(X.shape[1])[None])
    theirs = own(X, pe, impl._mask(X.shape[1], True))[0]
    assert transformers.__version__ == "5.23.0"
    assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-6) and not torch.equal(ours, theirs)


def test_unmeasured_families_are_refused():
    """Cohere and GPT-J are measured now (their float32 casts are patched, FLOAT64_PATCHES); a
    family without a module spec is refused by name."""
    assert impl.FLOAT32_INSIDE == {}
    c = impl.check_family_of({"model_type": "cohere", "hidden_size": 64, "num_attention_heads": 4})
    assert c.agrees
    with pytest.raises(ConfigError, match="has no real-implementation check"):
        impl.check_family_of({"model_type": "opt", "hidden_size": 64, "num_attention_heads": 4})


def test_census_config_through_its_real_module():
    path = Path(impl.__file__).parent.parent / "data" / "configs" / "llama-3-8b.json"
    c = impl.check_family_of(json.loads(path.read_text()))
    assert (c.config.n_heads, c.config.n_kv_heads, c.config.rotary_dim) == (8, 2, 2)
    assert c.rank == c.identified == 308 and c.agrees


@pytest.mark.parametrize("family", CHAPTER_9)
def test_group_action_on_the_real_weights_leaves_the_output(family):
    built = impl.build(family, **layer(family))
    p = impl.to_params(built)
    back = impl.from_params(built, p)
    assert all(torch.allclose(back[n], t, rtol=0, atol=1e-15) for n, t in impl.parameters(built).items())
    r = impl.symmetry_check(built, seed=1)
    assert r["move"] > 0.2 and r["change"] < 1e-13


def test_a_broken_action_changes_the_output():
    """The check can fail: W_Q A with W_K A (not A^{-T}) changes a real module's output."""
    built = impl.build("llama", **layer("llama"))
    p = impl.to_params(built)
    A = torch.eye(4, dtype=torch.float64) * 1.5
    p = dict(p, W_Q=p["W_Q"] @ A, W_K=p["W_K"] @ A)
    X = impl.inputs(built.config, n_sequences=2)
    with torch.no_grad():
        change = (impl.forward(built, X, impl.from_params(built, p)) - impl.forward(built, X)).abs().max()
    assert change > 1e-3


def test_gemma2_soft_capping_with_a_key_bias_on_the_real_module():
    """Gemma 2 caps its scores (50): the key bias becomes visible; with full RoPE and distinct
    frequencies it was already identified, so the count is the plain layer's."""
    c = impl.check("gemma2", d=8, H=2, G=2, k=4, bias=True)
    assert (c.config.softcap, c.config.bias) == (50.0, "qkvo")
    assert c.rank == c.identified == 240 and c.agrees


@pytest.mark.parametrize("family, kw, qk_norm, identified", [
    ("stablelm", dict(d=8, H=2, G=2, k=4, rope_fraction=0.5, bias=True), "layernorm", 218),
    ("stablelm", dict(d=12, H=4, G=2, k=3, rope_fraction=2 / 3), "layernorm", 350),
    ("phi", dict(d=8, H=2, G=2, k=4, rope_fraction=0.5, bias=True), "layernorm_shared", 219),
    ("persimmon", dict(d=8, H=2, G=2, k=4, rope_fraction=0.5, bias=True), "layernorm_shared", 219),
])
def test_qk_layernorm_modules_agree(family, kw, qk_norm, identified):
    """StableLM's per-head QK LayerNorm and Phi/Persimmon's shared one (gain and shift)."""
    c = impl.check(family, qk_layernorm=True, **kw)
    assert c.config.qk_norm == qk_norm and c.rank == c.identified == identified and c.agrees


@pytest.mark.parametrize("family, kw", [
    ("llama", dict(rope_fraction=1.0, bias=True)), ("olmo2", dict(rope_fraction=1.0, bias=True)),
    ("olmoe", dict(G=1, rope_fraction=1.0)), ("qwen3", dict(rope_fraction=1.0)),
    ("falcon", dict(rope_fraction=1.0, bias=True)), ("gpt_neox", dict(rope_fraction=0.5, bias=True)),
    ("phi", dict(rope_fraction=0.5)), ("gpt2", {}), ("bert", {}),
    ("gemma2", dict(rope_fraction=1.0, bias=True, query_pre_attn_scalar=4))])   # capped, scale 1/sqrt(k)
def test_idlib_forward_is_the_real_modules_function(family, kw):
    """On the module's own weights (to_params), idlib.attention.forward gives the module's output
    (to float32 round-off of the modules' rotary frequencies): the layer idlib counts is the layer
    people run, QK-norm over all heads (OLMo 2, OLMoE) and gains (Qwen3) included."""
    from idlib.attention import forward as idlib_forward
    built = impl.build(family, **{**dict(d=8, H=2, G=2, k=4), **kw})
    X = impl.inputs(built.config, 0, n_sequences=2)
    with torch.no_grad():
        ours, theirs = idlib_forward(built.config, impl.to_params(built), X), impl.forward(built, X)
    assert float((ours - theirs).abs().max() / theirs.abs().max()) < 1e-7
