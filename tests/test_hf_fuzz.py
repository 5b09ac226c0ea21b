"""config.json files written by transformers' own config classes, made hostile, read by idlib and
by the code they configure.

Hypothesis draws a family and a small layer (sizes that fit and sizes that do not), has the
family's config class write it (transformers 5's layout, or the older one with the rotary share
and base at the top level), then adds stray and null fields (``num_key_value_heads``,
``head_dim``, the rotary share under both its names).  The oracle is the code itself: the
family's config class loads the file, its attention module is built with random weights
(nothing downloaded) and run forward in float64.  idlib must either refuse the file (one line)
or read a layer whose parameter count equals the module's and whose rotated dimensions equal
its rotary embedding's: never a count of a layer the code does not run.
"""
from __future__ import annotations

import types
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idlib.attention import n_params
from idlib.config import ConfigError
from idlib.hf import model_from_hf
from idlib.implementations import modules

FAMILIES = sorted(f for f, s in modules.SPECS.items() if not s.latent)


def run_module(family: str, data: dict, layer: int = 0) -> tuple[int, int | None] | str:
    """(parameters, rotated dims per head or None) of the family's module for ``data`` after a
    forward pass in float64, or why the code refuses it."""
    transformers = modules._transformers()
    cls = getattr(transformers, modules.SPECS[family].config_class)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cfg = cls.from_dict(data)
            cfg._attn_implementation = modules.ATTENTION
            module, rotary = modules._module(family, cfg, layer)
        module = module.to(torch.float64).eval()
        rotary = None if rotary is None else rotary.to(torch.float64)
        modules.randomize(module, 0)
        own = modules._norms_in_float64(module, 0.0)
        stand_in = types.SimpleNamespace(causal=True, alibi=getattr(cfg, "alibi", False),
                                         n_heads=getattr(cfg, "num_attention_heads", 1))
        d = getattr(cfg, "hidden_size", None) or cfg.n_embd
        built = modules.Built(family, cfg, module, stand_in, rotary, layer, own)
        with torch.no_grad():
            out = modules.forward(built, torch.randn(1, 5, d, dtype=torch.float64))
        if tuple(out.shape) != (1, 5, d) or not bool(torch.isfinite(out).all()):
            return f"output of shape {tuple(out.shape)}"
    except Exception as e:                    # noqa: BLE001 - the code's own refusal, whatever it is
        return f"{type(e).__name__}: {e}"
    params = sum(p.numel() for name, p in module.named_parameters() if "LayerNorm" not in name)
    freq = getattr(rotary, "inv_freq", None) if rotary is not None else None
    return params, None if freq is None else 2 * freq.numel()


SIZES = st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16])
STRAY = st.sampled_from(["num_key_value_heads", "head_dim", "partial_rotary_factor", "rotary_pct"])
STRAY_VALUE = st.one_of(st.none(), st.sampled_from([1, 2, 4, 8, 16]),
                        st.sampled_from([0.25, 0.5, 1.0]))


@st.composite
def hostile_files(draw):
    family = draw(st.sampled_from(FAMILIES))
    spec = modules.SPECS[family]
    H = draw(st.sampled_from([1, 2, 4])) * draw(st.sampled_from([1, spec.heads_multiple]))
    G = draw(st.sampled_from([g for g in range(1, H + 1) if H % g == 0] + [3]))
    k = draw(st.sampled_from([2, 3, 4, 6, 8]))
    d = draw(st.sampled_from([H * k, 8, 12, 16]))
    fraction = draw(st.sampled_from([1.0, 0.5, 0.25]))
    try:
        data = modules.hf_config(family, d, H, G, k, fraction, draw(st.booleans())).to_dict()
    except ConfigError:
        data = None                           # the config class itself refuses the sizes
    if data is None:
        return family, None
    for _ in range(draw(st.integers(0, 3))):
        key = draw(STRAY)
        value = draw(STRAY_VALUE)
        if key in ("num_key_value_heads", "head_dim") and isinstance(value, float):
            value = int(value * 8)
        data[key] = value
    rope = data.get("rope_parameters")
    if draw(st.booleans()) and isinstance(rope, dict) and "rope_theta" in rope:
        data.pop("rope_parameters")           # the older layout: share and base at the top level
        data["rope_theta"] = rope["rope_theta"]
        if "partial_rotary_factor" in rope:
            data[draw(st.sampled_from(["partial_rotary_factor", "rotary_pct"]))] = \
                rope["partial_rotary_factor"]
    return family, data


@settings(max_examples=250, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=hostile_files())
def test_idlib_counts_only_what_the_code_runs(case):
    family, data = case
    if data is None:
        return
    try:
        model = model_from_hf(data)
    except ConfigError as e:                  # refused: one line, no count
        assert "\n" not in str(e)
        return
    layer = model.counted[0].layers[0] if model.counted else 0
    truth = run_module(family, data, layer)
    assert not isinstance(truth, str), f"idlib reads a file the code refuses: {truth}"
    config = model.layer(layer).config
    rotated = config.rotary_dim if getattr(config, "rotary_dim", 0) else None
    assert n_params(config) == truth[0]
    if truth[1] is not None and rotated is not None:
        assert rotated == truth[1]


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_as_its_config_class_writes_it_is_read_and_runs(family):
    """The plain file of every family: read, and the counts agree (no refusal of a valid file)."""
    spec = modules.SPECS[family]
    H = 2 * spec.heads_multiple
    data = modules.hf_config(family, 8 * H, H, H, 8).to_dict()
    model = model_from_hf(data)
    layer = model.counted[0].layers[0]
    truth = run_module(family, data, layer)
    assert not isinstance(truth, str), truth
    assert n_params(model.layer(layer).config) == truth[0]
