"""The model types read as a family with their own config defaults (kind "own_defaults" of
idlib/data/model_types.json), checked against their real transformers modules.

For each one, its own config class writes two tiny configs (nothing downloaded; 2 layers): one
with the class's defaults for every field the family reads (``defaults``), one with each of them
set away from its default (``explicit``: 2 key/value heads, head_dim 8, every bias and QK-norm
flag flipped, half the head rotated where the family's code honours a share), as save_pretrained
writes them (``to_json_string``); the first also as a file giving the sizes alone, every other
field left to the defaults idlib stores.  idlib reads each; the model class is built from the
config (random weights, float64) and, for every layer type idlib counts, the attention module of
its first layer must have the parameters idlib counts and its rotary embedding rotate the
dimensions idlib says (none where idlib says the layer has no RoPE: then the module's output does
not change when the positions' cos/sin do); a layer idlib does not count has no such module.

For a seeded sample of the model types (:data:`RANK_SAMPLE`, 12 of :data:`RANK_POOL`: those whose
attention module is measured whole on idlib.implementations' float64 harness), the count is checked
against the certified rank of the real module's Jacobian in float64
(``idlib.implementations.measure``).
"""
from __future__ import annotations

import json
import random
import re
import warnings
from pathlib import Path

import importlib

import pytest
import torch

from idlib.attention import n_params
from idlib.config import AttentionConfig, ConfigError
from idlib.hf import (FAMILIES, HEADS_KEYS, MODEL_TYPES, OWN_DEFAULTS, WIDTH_KEYS, attention_fields_from_hf,
                      model_from_hf)

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
# per-layer fields a config.json written by transformers carries (they say which layers are what)
STRUCTURE = ("layer_types", "no_rope_layers", "full_attention_interval", "sliding_window_pattern")

FIXTURES = json.loads((Path(__file__).parent / "data" / "model_types_real.json").read_text())
READ = sorted(mt for mt, rec in MODEL_TYPES.items() if rec["kind"] == "own_defaults")
NOT_ATTENTION = re.compile(r"LayerNorm|layer_norm|relative_attention_bias")


def test_every_model_type_read_with_its_defaults_has_a_real_check():
    assert sorted(FIXTURES) == READ == sorted(OWN_DEFAULTS)
    for mt in READ:
        rec = MODEL_TYPES[mt]
        assert rec["family"] in FAMILIES and rec["why"]
        assert set(rec["code"]) <= set(rec["row"])


def build(model_type: str, kwargs: dict) -> tuple[dict, torch.nn.Module]:
    """(config.json as save_pretrained writes it, the model built from it on the meta device:
    its modules and shapes, no weights)."""
    fx = FIXTURES[model_type]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.CONFIG_MAPPING[model_type](**kwargs)
        data = json.loads(cfg.to_json_string())
        for key, value in fx.get("attrs", {}).items():   # what the model's wrapper config would give
            setattr(cfg, key, value)
        cfg._attn_implementation = "eager"
        module, _, name = fx["model"].rpartition(".")
        with torch.device("meta"):
            model = getattr(importlib.import_module(module), name)(cfg).eval()
    return data, model


def rotary_dims(model: torch.nn.Module, path: str, layer_type: str | None) -> set[int]:
    """Twice the frequencies of the rotary embeddings beside the attention modules (of the layer
    type, where the embedding keeps one table per type)."""
    prefix = path.split(".{i}")[0].rpartition(".")[0]
    found = {}
    for name, buf in model.named_buffers():
        if name.endswith("inv_freq") and name.startswith(prefix):
            found[name] = 2 * buf.numel()
    typed = {k: v for k, v in found.items() if layer_type and f"{layer_type}_inv_freq" in k}
    return set((typed or found).values())


def check_file(model_type: str, data: dict, model: torch.nn.Module) -> int:
    """Every layer type idlib reads in ``data`` against ``model``; the number checked."""
    fx = FIXTURES[model_type]
    read = model_from_hf(data)
    assert read.n_layers == len(model.get_submodule(fx["path"].split(".{i}")[0]))
    types = getattr(model.config, "layer_types", None)
    counted = {type(model.get_submodule(fx["path"].format(i=k.layers[0]))) for k in read.counted}
    for kind in read.types:
        i = kind.layers[0]
        if kind.config is None:          # no module there, or not the attention the others have
            try:
                assert type(model.get_submodule(fx["path"].format(i=i))) not in counted
            except AttributeError:
                pass
            continue
        module = model.get_submodule(fx["path"].format(i=i))
        real = sum(p.numel() for n, p in module.named_parameters() if not NOT_ATTENTION.search(n))
        assert n_params(kind.config) == real, f"layer {i}: idlib {kind.config}"
        if isinstance(kind.config, AttentionConfig) and kind.config.rope_fraction:
            assert rotary_dims(model, fx["path"], types[i] if types else None) == \
                {kind.config.rotary_dim}, f"layer {i}"
    return len(read.counted)


def structure(model_type: str) -> tuple[str, ...]:
    """The fields that say which layers are attention (a file gives them: transformers writes them)."""
    layers = MODEL_TYPES[model_type]["row"].get("layers") or ["", {}]
    return tuple(v for k, v in layers[1].items() if k in ("field", "period", "offset"))


@pytest.mark.parametrize("model_type", READ)
def test_read_with_its_defaults_as_the_real_module_runs(model_type):
    fx = FIXTURES[model_type]
    data, model = build(model_type, fx["defaults"])
    assert check_file(model_type, data, model)
    # the sizes alone: every other field takes the defaults idlib stores for the model type
    row = OWN_DEFAULTS[model_type]
    keys = WIDTH_KEYS + HEADS_KEYS + LAYER_KEYS + row.width_keys + row.heads_keys + \
        structure(model_type) + STRUCTURE + tuple(k for k, _, _ in row.refuse_values) + row.layers_keys
    bare = model_from_hf({"model_type": model_type, **{k: data[k] for k in keys if k in data}})
    assert [(t.layers, t.config) for t in bare.types] == \
        [(t.layers, t.config) for t in model_from_hf(data).types]


@pytest.mark.parametrize("model_type", READ)
def test_read_with_every_field_given_as_the_real_module_runs(model_type):
    fx = FIXTURES[model_type]
    data, model = build(model_type, fx["explicit"])
    assert check_file(model_type, data, model)
    # the same explicit fields read as the family give the same layer, unless its code differs
    # (the sizes the family reads and the file leaves to the model type's defaults written out)
    rec = MODEL_TYPES[model_type]
    if not rec["code"] and not FAMILIES[rec["family"]].latent:
        own = attention_fields_from_hf(data)
        written = {**data, "model_type": rec["family"], "num_key_value_heads": own["n_kv_heads"],
                   "head_dim": own["head_dim"]}
        try:
            family = attention_fields_from_hf(written)
        except ConfigError as e:           # a field of the model type's own that the family refuses
            assert any(repr(k) in str(e) for k in rec["harmless"]), e
        else:
            assert own == family


# -- the count against the certified rank of the real module (a seeded sample) --------------------

# measured whole, these modules are not the attention layer alone, or do not run on the harness
# below (idlib.implementations' eager64 and float64 norms): they are not in the sample
NOT_MEASURED = {
    **{mt: "its attention module adds the block's residual and LayerNorm" for mt in (
        "mpnet", "tvp", "blip_2_qformer", "instructblip_qformer", "instructblipvideo_qformer",
        "switch_transformers", "layoutlmv3")},
    **{mt: "its forward takes the inputs in another form (q, k, v or chunks apart)" for mt in (
        "canine", "ctrl", "flaubert", "xlm")},
    **{mt: "its M-RoPE sections are sized for a head wider than the sample's" for mt in (
        "cosmos3_edge_text", "glm4v_moe_text", "glm4v_text", "glm_image_text", "glm_ocr_text",
        "paddleocr_vl_text", "qwen2_5_omni_talker", "qwen2_5_omni_text", "ernie4_5_vl_moe_text")},
    **{mt: "multi-head latent attention (chapter 9 measures DeepSeek's module)" for mt in (
        "axk1", "glm4_moe_lite", "minicpm3")},
    "ernie4_5_moe": "its RoPE rounds through float32 (the ernie4_5 float64 patch is for its own module)",
    "modernbert-decoder": "a float32 step inside (measured uncertified in float64)",
    "git": "its attention picks its function from a registry the harness does not fill",
    "xglm": "its mask is built in float32 inside the module",
}
RANK_POOL = sorted(mt for mt in READ if mt not in NOT_MEASURED)
RANK_SAMPLE = sorted(random.Random(28).sample(RANK_POOL, 12))
HARNESS_KWARGS = ("is_causal", "output_attentions", "deterministic")


def _eager64(module, query, key, value, attention_mask, **kwargs):
    """idlib's eager64, the keywords that do not change the function dropped (the mask says
    causal or not; what the module returns; kernel determinism)."""
    from idlib.implementations import modules
    return modules.eager64(module, query, key, value, attention_mask,
                           **{k: v for k, v in kwargs.items() if k not in HARNESS_KWARGS})


def test_the_rank_pool_is_most_of_the_model_types_read():
    assert set(NOT_MEASURED) <= set(READ)
    assert len(RANK_POOL) >= len(READ) * 2 // 3 and len(RANK_SAMPLE) == 12


@pytest.mark.parametrize("model_type", RANK_SAMPLE)
def test_count_is_the_certified_rank_of_the_real_module(model_type):
    """A small layer (width 16, 4 heads, 2 key/value heads and head_dim 4 where the model type reads
    them) of the model type's own model, random weights, float64: the Jacobian of its attention
    module's output in its parameters has the rank idlib's count says (certified gap)."""
    from idlib.implementations import modules
    from idlib.implementations.measure import measure
    from idlib.verdict import check
    fx = FIXTURES[model_type]
    kw = dict(fx["explicit"], hidden_size=16, num_attention_heads=4)
    kw.update({k: 16 for k in ("emb_dim", "embed_dim", "d_model", "n_embd") if k in kw})
    kw.update({k: 2 for k in ("num_key_value_heads",) if k in kw})
    kw.update({k: 4 for k in ("head_dim", "d_kv") if k in kw})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.CONFIG_MAPPING[model_type](**kw)
        data = json.loads(cfg.to_json_string())
        for key, value in fx.get("attrs", {}).items():
            setattr(cfg, key, value)
        transformers.AttentionInterface.register("idlib_test_eager64", _eager64)
        cfg._attn_implementation = "idlib_test_eager64"
        module, _, name = fx["model"].rpartition(".")
        torch.manual_seed(0)
        model = getattr(importlib.import_module(module), name)(cfg)
    kind = model_from_hf(data).counted[0]
    i = kind.layers[0]
    att = model.get_submodule(fx["path"].format(i=i)).to(torch.float64).eval()
    modules.randomize(att, 0)
    own = modules._norms_in_float64(att, 0.0)
    rotary = None
    if kind.config.rope_fraction:
        prefix = fx["path"].split(".{i}")[0].rpartition(".")[0]
        rotary = next(m for n, m in model.named_modules()
                      if n.startswith(prefix) and "Rotary" in type(m).__name__).to(torch.float64)
    wrapped = hasattr(att, "self") and hasattr(att, "output")       # BERT's self-attention + output
    built = modules.Built("bert" if wrapped else model_type, cfg, att, kind.config, rotary, i, own)
    result = check(kind.config, measure(built, 0), label=model_type)
    assert result.agrees, (f"{model_type}: P {result.total} (measured {result.n_params}), I "
                           f"{result.identified}, rank {result.rank}, gap {result.gap:.1e}")
