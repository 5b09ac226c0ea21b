"""idlib.implementations on the attention people run in 2026 (chapter 10): ALiBi (BLOOM, MPT,
Falcon), sinks (GPT-OSS), the output gate (Qwen3-Next), layers that differ (Llama 4, SmolLM3,
Cohere2, EXAONE 4), and Llama variants; every float32 step of their modules re-evaluated in
float64 (idlib.implementations.FLOAT64_PATCHES), the patches undone after each forward."""
import dataclasses
import importlib

import pytest
import torch

pytest.importorskip("transformers")

import transformers  # noqa: E402

from idlib import implementations as impl           # noqa: E402
from idlib.attention import forward as idlib_forward  # noqa: E402
from idlib.config import ConfigError                 # noqa: E402
from idlib.counting import count                     # noqa: E402
from idlib.implementations import modules            # noqa: E402

LAYER = dict(d=16, H=4, G=2, k=4)
TWO = dict(num_hidden_layers=2, no_rope_layers=[1, 0])      # layer 0 RoPE, layer 1 NoPE
FOUR = dict(num_hidden_layers=4)                            # layers 0-2 sliding, layer 3 full
# (family, build kwargs, P, U): the measured counts of /tmp/measure/REPORT.md, which are
# idlib.counting.count of the layer each module implements
CASES = [
    ("bloom", dict(d=16, H=4), 1088, 160),
    ("bloom", dict(d=12, H=3), 624, 120),                   # slopes of a non-power-of-2 H
    ("mpt", dict(d=16, H=4), 1024, 128),
    ("falcon", dict(d=16, H=4, G=4, alibi=True, new_decoder_architecture=False), 1024, 128),
    ("falcon", dict(d=16, H=4, G=4, alibi=True, bias=True, new_decoder_architecture=False), 1088, 160),
    ("falcon", dict(d=16, H=4, G=1, alibi=True, bias=True), 680, 40),
    ("falcon", dict(d=16, H=4, G=2, alibi=True), 768, 64),  # new decoder architecture, grouped
    ("gpt_oss", dict(LAYER, bias=True, layer_idx=0), 820, 40),
    ("gpt_oss", dict(LAYER, bias=True, layer_idx=1), 820, 40),
    ("gpt_oss", dict(LAYER, G=4, bias=True), 1092, 80),
    ("qwen3_next", dict(d=16, H=4, G=2, k=8, rope_fraction=0.25), 2064, 29),
    ("llama4_text", dict(LAYER, layer_idx=0, **TWO), 768, 42),
    ("llama4_text", dict(LAYER, layer_idx=1, **TWO), 768, 64),
    ("llama4_text", dict(LAYER, layer_idx=0, use_qk_norm=False, **TWO), 768, 40),
    ("smollm3", dict(LAYER, layer_idx=0, **TWO), 768, 40),
    ("smollm3", dict(LAYER, layer_idx=1, **TWO), 768, 64),
    ("cohere2", dict(LAYER, layer_idx=0, **FOUR), 768, 40),
    ("cohere2", dict(LAYER, layer_idx=3, **FOUR), 768, 64),
    ("exaone4", dict(LAYER, layer_idx=0, **FOUR), 776, 40),
    ("exaone4", dict(LAYER, layer_idx=3, **FOUR), 776, 42),
    ("exaone4", dict(LAYER, layer_idx=3, sliding_window=None, layer_types=["full_attention"] * 4, **FOUR),
     776, 40),                                              # no window: RoPE on every layer
    ("helium", dict(LAYER, bias=True), 800, 40),
    ("ernie4_5", dict(LAYER, bias=True), 816, 48),
    ("codegen", dict(d=16, H=4, rope_fraction=0.5), 1024, 88),
    ("gptj", dict(d=16, H=4, rope_fraction=0.5), 1024, 88),
    ("ministral", dict(LAYER), 768, 40),
    ("seed_oss", dict(LAYER, bias="qkv"), 800, 40),
    ("granitemoe", dict(LAYER, bias=True), 816, 48),
    ("nemotron", dict(LAYER, bias=True, rope_fraction=0.5), 816, 56),
    ("olmo3", dict(LAYER, layer_idx=0, **FOUR), 792, 38),
    ("olmo3", dict(LAYER, layer_idx=3, **FOUR), 792, 38),
    ("cohere", dict(LAYER), 768, 40),
    ("cohere", dict(LAYER, use_qk_norm=True), 792, 138),
]
IDS = [f"{f}-{i}" for i, (f, *_) in enumerate(CASES)]


@pytest.mark.parametrize("family, kw, P, U", CASES, ids=IDS)
def test_real_module_is_certified_and_agrees(family, kw, P, U):
    c = impl.check(family, **kw)
    assert c.certified and c.gap >= 1e4 and c.agrees
    assert (c.total, c.unidentified, c.measured_unidentified) == (P, U, U)
    assert count(c.config).unidentified == U


def test_the_layer_kinds_read_back():
    """build reads the layer it builds: RoPE or NoPE, QK-norm on the RoPE layers only (Llama 4),
    the gate and sinks, ALiBi; a linear-attention layer is not built."""
    kind = lambda fam, **kw: impl.build(fam, **{**LAYER, **kw}).config  # noqa: E731
    rope, nope = kind("llama4_text", layer_idx=0, **TWO), kind("llama4_text", layer_idx=1, **TWO)
    assert (rope.qk_norm, rope.rotary_dim, nope.qk_norm, nope.rotary_dim) == ("plain", 4, "none", 0)
    assert kind("cohere2", layer_idx=3, **FOUR).rotary_dim == 0
    assert kind("exaone4", layer_idx=3, **FOUR).qk_norm == "gain"
    assert kind("gpt_oss").sinks and kind("bloom", G=4).alibi and kind("mpt", G=4).alibi
    q = impl.build("qwen3_next", d=16, H=4, G=2, k=8, rope_fraction=0.25)
    assert q.layer_idx == 3 and q.config.output_gate and q.config.qk_norm == "gain"
    with pytest.raises(ConfigError, match="layer 0 is not counted .linear attention"):
        impl.build("qwen3_next", d=16, H=4, G=2, k=8, rope_fraction=0.25, layer_idx=0)


def _small(cls, **kw):
    return getattr(transformers, cls)(**kw).to_dict()


def test_a_config_file_gets_one_check_per_layer_type():
    """check_model_of: one twin per counted layer type, at the type's first layer, with the file's
    structure; the linear-attention layers of Qwen3-Next are not checked."""
    data = _small("Cohere2Config", hidden_size=64, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=8)
    (rope, a), (nope, b) = impl.check_model_of(data)
    assert (rope.layers, nope.layers) == ((0, 1, 2, 4, 5, 6), (3, 7))
    assert (a.config.rotary_dim > 0, b.config.rotary_dim) == (True, 0) and a.agrees and b.agrees
    assert a.certified and b.certified and a.gap >= 1e4 and b.gap >= 1e4
    data = _small("Llama4TextConfig", hidden_size=64, num_attention_heads=8, num_key_value_heads=2, head_dim=8,
                  num_hidden_layers=8)
    (_, a), (_, b) = impl.check_model_of(data)
    assert (a.config.qk_norm, b.config.qk_norm, b.config.rotary_dim) == ("plain", "none", 0)
    assert a.agrees and b.agrees and a.unidentified != b.unidentified
    data = _small("Qwen3NextConfig", hidden_size=64, num_attention_heads=8, num_key_value_heads=2, head_dim=16,
                  num_hidden_layers=8)
    [(full, c)] = impl.check_model_of(data)
    assert full.layers == (3, 7) and c.config.output_gate and c.config.head_dim % 8 == 0 and c.agrees
    with pytest.raises(ConfigError, match="its layers differ .2 counted types"):
        impl.check_family_of(_small("SmolLM3Config", hidden_size=64, num_attention_heads=8,
                                    num_key_value_heads=2, num_hidden_layers=8))


@pytest.mark.parametrize("cls, kw", [
    ("GptOssConfig", dict(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, head_dim=8,
                          num_hidden_layers=4)),
    ("BloomConfig", dict(hidden_size=64, n_head=8)),
    ("FalconConfig", dict(hidden_size=64, num_attention_heads=8, alibi=True)),
    ("CodeGenConfig", dict(n_embd=64, n_head=8, rotary_dim=4)),
    ("HeliumConfig", dict(hidden_size=64, num_attention_heads=8, num_key_value_heads=4, head_dim=8,
                          attention_bias=True)),
    ("Exaone4Config", dict(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, head_dim=8,
                           num_hidden_layers=8)),
    ("Olmo3Config", dict(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=4)),
    ("CohereConfig", dict(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, use_qk_norm=True)),
])
def test_config_files_through_their_modules(cls, kw):
    """The small twins fit each module (CodeGen: heads in fours; Helium: H k = d; a norm over all
    heads: H k <= d) and agree; a uniform file also passes check_family_of."""
    results = impl.check_model_of(_small(cls, **kw))
    for kind, c in results:
        assert c.agrees and c.certified and c.gap >= 1e4
    c = results[0][1].config
    if cls == "CodeGenConfig":
        assert c.n_heads % 4 == 0 and c.rope_fraction == 0.5
    if cls == "HeliumConfig":
        assert c.n_heads * c.head_dim == c.d_model
    if cls == "CohereConfig":
        assert c.qk_norm == "layernorm"
    if cls == "FalconConfig":
        assert c.alibi and c.rotary_dim == 0
    if len(results) == 1:
        assert impl.check_family_of(_small(cls, **kw)).agrees


def test_the_twin_must_read_as_the_file(monkeypatch):
    """A twin that does not read as the file's layer type is refused, not measured: here Cohere2's
    twin without the file's structure (Cohere2Config's default window puts RoPE on layer 0, the
    file has no window and no RoPE anywhere)."""
    data = _small("Cohere2Config", hidden_size=64, num_attention_heads=8, num_key_value_heads=2,
                  num_hidden_layers=8, sliding_window=None)
    [(kind, c)] = impl.check_model_of(data)                # no window: no RoPE on any layer
    assert kind.layers == tuple(range(8)) and c.config.rotary_dim == 0 and c.agrees
    fam, layer = impl.small_model_layer(data, kind)
    assert (fam, layer["layer_idx"], layer["sliding_window"], layer["num_hidden_layers"]) == ("cohere2", 0, None, 8)
    monkeypatch.setitem(impl.SPECS, "cohere2", dataclasses.replace(impl.SPECS["cohere2"], structure=()))
    with pytest.raises(ConfigError, match="twin's layer 0 does not read as the file's layer 0 "
                                          r"\(rope_fraction: 0.0 in the file, 1.0 in the twin\)"):
        impl.check_model_of(data)


PATCHED = [c for c in CASES if c[0] in impl.FLOAT64_PATCHES] + [
    ("gemma", dict(d=8, H=2, G=2, k=4), None, None), ("qwen3", dict(d=8, H=2, G=1, k=4), None, None),
    ("deepseek_v2", dict(impl.SMALL_LATENT, q_latent=6), None, None)]


@pytest.mark.parametrize("family, kw, P, U", PATCHED, ids=[f"{f}-{i}" for i, (f, *_) in enumerate(PATCHED)])
def test_float64_path_is_the_modules_own_function(family, kw, P, U):
    """With every patch, the forward is the module's own float32 path to float32 round-off: the
    patches change the precision, not the function."""
    built = impl.build(family, **kw)
    X = impl.inputs(built.config, n_sequences=2)
    with torch.no_grad():
        ours, own = impl.forward(built, X), impl.forward(built, X, float64=False)
    assert float((ours - own).abs().max() / own.abs().max()) < 1e-6


@pytest.mark.parametrize("family, kw", [
    ("bloom", dict(d=16, H=4)),                                 # the softmax (b_K's row shifts)
    ("cohere2", dict(LAYER, layer_idx=0, **FOUR)),              # RoPE applied in float32
    ("ernie4_5", dict(LAYER, bias=True)),                       # RoPE applied in float32
    ("llama4_text", dict(LAYER, layer_idx=0, **TWO)),           # complex64 RoPE, float32 L2 norm
    ("exaone4", dict(LAYER, layer_idx=3, **FOUR)),              # float32 RMSNorm
    ("codegen", dict(d=16, H=4, rope_fraction=0.5)),            # float32 scores and sin/cos table
    ("cohere", dict(LAYER, use_qk_norm=True)),                  # float32 LayerNorm and RoPE
])
def test_the_patches_matter(family, kw):
    """On the module's own float32 path the measurement does not agree: spurious identified
    directions at float32 round-off (rank above the closed form I, or no certified gap)."""
    built = impl.build(family, **kw)
    m, I = impl.measure(built, float64=False), count(built.config).identified
    assert m.rank > I or not m.certified
    assert impl.measure(built).rank == I


def _snapshot(built):
    mods = {importlib.import_module(f"transformers.models.{s.module}.modeling_{s.module}")
            for s in impl.SPECS.values()}
    glob = {(m.__name__, k): id(v) for m in mods for k, v in vars(m).items()}
    cls = {k: id(v) for k, v in vars(type(built.module)).items()}
    inst = {k: (id(v), v.dtype) if torch.is_tensor(v) else id(v) for k, v in vars(built.module).items()}
    bufs = {k: (id(v), v.dtype) for k, v in built.module.named_buffers()}
    kids = {k: id(v) for k, v in built.module.named_children()}
    return glob, cls, inst, bufs, kids, built.hf_config._attn_implementation


@pytest.mark.parametrize("family, kw", [
    ("bloom", dict(d=16, H=4)), ("mpt", dict(d=16, H=4)), ("llama4_text", dict(LAYER, layer_idx=0, **TWO)),
    ("cohere2", dict(LAYER, layer_idx=0, **FOUR)), ("ernie4_5", dict(LAYER)), ("codegen", dict(d=16, H=4)),
    ("gptj", dict(d=16, H=4)), ("cohere", dict(LAYER, use_qk_norm=True)),
    ("qwen3_next", dict(d=16, H=4, G=2, k=8, rope_fraction=0.25)),
    ("deepseek_v2", dict(impl.SMALL_LATENT, q_latent=6))])
def test_patches_are_undone(family, kw):
    """After a forward (either path), a Jacobian, and a patched block left by an error, nothing
    global or on the module is changed: transformers' module namespaces, the class, the
    instance's attributes, buffers, children and attention implementation."""
    built = impl.build(family, **kw)
    before = _snapshot(built)
    X = impl.inputs(built.config, n_sequences=1)
    with torch.no_grad():
        impl.forward(built, X), impl.forward(built, X, float64=False)
        impl.jacobian(built, X[:, :4])
    assert _snapshot(built) == before
    with pytest.raises(RuntimeError, match="inside"):
        with impl.patches(built):
            assert (_snapshot(built) != before) == (family in modules._PATCHERS)
            raise RuntimeError("inside")
    assert _snapshot(built) == before


def test_every_patch_is_documented():
    assert set(modules._PATCHERS) <= set(impl.FLOAT64_PATCHES) <= set(impl.SPECS)
    assert impl.FLOAT32_INSIDE == {} and {"cohere", "gptj"} <= set(impl.SPECS)
    assert set(impl.FAMILIES_2026) <= set(impl.SPECS)


def test_alibi_tensors_are_the_models_own():
    """The float64 ALiBi tensors equal BLOOM's, Falcon's and MPT's own builders (whose float32 /
    bfloat16 slopes are exact for these heads)."""
    from transformers.models.bloom import modeling_bloom as mb
    from transformers.models.falcon import modeling_falcon as mf
    from transformers.models.mpt import modeling_mpt as mm
    for H in (2, 3, 4, 6, 8):
        assert torch.allclose(impl.alibi_slopes(H), mb._get_alibi_slopes(H, torch.device("cpu")).double(),
                              rtol=1e-7, atol=0)
        own = mf.build_alibi_tensor(torch.ones(1, 5, dtype=torch.long), H, torch.float64)
        assert torch.allclose((impl.alibi_slopes(H)[:, None, None] * torch.arange(5.0)), own, rtol=1e-2)
        assert torch.allclose(impl.mpt_alibi(H, 7), mm.build_mpt_alibi_tensor(H, 7).double(), rtol=1e-7)


@pytest.mark.parametrize("family, kw", [
    ("bloom", dict(d=16, H=4)), ("mpt", dict(d=16, H=4)), ("falcon", dict(d=16, H=2, G=1, alibi=True)),
    ("codegen", dict(d=16, H=4, rope_fraction=0.5)), ("gptj", dict(d=16, H=4, rope_fraction=0.5)),
    ("helium", dict(LAYER, bias=True)), ("ernie4_5", dict(LAYER, bias=True)),
    ("cohere2", dict(LAYER, layer_idx=0, **FOUR)), ("cohere", dict(LAYER)),
    ("llama4_text", dict(LAYER, layer_idx=0, **TWO)), ("llama4_text", dict(LAYER, layer_idx=1, **TWO)),
    ("smollm3", dict(LAYER, layer_idx=0, **TWO)), ("exaone4", dict(LAYER, layer_idx=3, **FOUR)),
    ("ministral", dict(LAYER)), ("seed_oss", dict(LAYER, bias="qkv")),
    ("nemotron", dict(LAYER, bias=True, rope_fraction=0.5)),
    ("olmo3", dict(LAYER, layer_idx=3, **FOUR)), ("granitemoe", dict(LAYER, bias=True, attention_multiplier=0.5)),
    ("gpt_oss", dict(LAYER, bias=True)), ("qwen3_next", dict(d=16, H=4, G=2, k=8, rope_fraction=0.25))])
def test_weights_in_idlibs_layout(family, kw, monkeypatch):
    """to_params / from_params (fused per head, CodeGen's four [q | v | k] blocks, interleaved RoPE
    pairs, the gate's rows, the sinks): idlib's forward on the module's weights is the module's
    output, and the symmetry group of idlib.symmetry leaves it unchanged where implemented.
    Falcon's slopes are 2 m_h / sqrt(k): FalconModel's eager path adds ALiBi / sqrt(k) twice, once
    folded into the mask and once in the module (its sdpa path once)."""
    built = impl.build(family, **kw)
    p = impl.to_params(built)
    back = impl.from_params(built, p)
    assert all(torch.allclose(back[n], t, rtol=0, atol=1e-15) for n, t in impl.parameters(built).items())
    X = impl.inputs(built.config, n_sequences=2)
    if family == "falcon":
        from idlib.variants import alibi
        plain, factor = alibi.bias_matrix, 2 / built.config.head_dim ** 0.5
        monkeypatch.setattr(alibi, "bias_matrix", lambda H, n: factor * plain(H, n))
    with torch.no_grad():
        ours, theirs = idlib_forward(built.config, p, X), impl.forward(built, X)
    assert float((ours - theirs).abs().max() / theirs.abs().max()) < 1e-7
    if family in ("gpt_oss", "qwen3_next"):
        with pytest.raises(ConfigError, match="not implemented"):
            impl.symmetry_check(built, seed=1)
        return
    r = impl.symmetry_check(built, seed=1)
    assert r["move"] > 0.2 and r["change"] < 1e-13
