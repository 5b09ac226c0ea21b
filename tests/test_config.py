"""AttentionConfig: defaults, every validation rule (with its message), copies and reading files."""
import dataclasses
import json
import math
import os
import re
import threading

import pytest

import numpy as np

from idlib.config import MAX_CONFIG_BYTES, RULES, AttentionConfig, ConfigError, read_json
from idlib.hf import config_from_file, config_from_hf


def test_defaults_are_derived():
    c = AttentionConfig(d_model=12, n_heads=3)
    assert (c.n_kv_heads, c.head_dim, c.value_dim) == (3, 4, 4)
    assert (c.rope_fraction, c.rope_base, c.bias, c.causal) == (0.0, 10000.0, "", False)
    assert c.group_size == 1 and c.rotary_dim == 0
    c = AttentionConfig(d_model=12, n_heads=6, n_kv_heads=2, head_dim=5, rope_fraction=0.8)
    assert (c.group_size, c.value_dim, c.rotary_dim) == (3, 5, 4)
    assert AttentionConfig(d_model=7).head_dim == 7          # one head: the whole width


def test_head_dim_need_not_divide_when_given():
    c = AttentionConfig(d_model=10, n_heads=3, head_dim=4, value_dim=2)
    assert (c.head_dim, c.value_dim) == (4, 2)
    c = AttentionConfig(d_model=2, n_heads=8, head_dim=1)    # more heads than dimensions
    assert c.n_heads == 8


def test_bias_is_normalised_to_qkvo_order():
    c = AttentionConfig(d_model=4, bias="ovq")
    assert c.bias == "qvo"
    assert [c.has_bias(x) for x in "qkvo"] == [True, False, True, True]


def test_frozen_and_replace_revalidates():
    c = AttentionConfig(d_model=8, n_heads=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.d_model = 4
    c2 = c.replace(bias="kv", causal=True)
    assert (c2.bias, c2.causal, c2.head_dim) == ("kv", True, 4)
    assert c.bias == ""                                      # the original is untouched
    with pytest.raises(ConfigError, match=re.escape("n_heads=2 must be divisible by n_kv_heads=3")):
        c.replace(n_kv_heads=3)


def test_to_dict_round_trip():
    c = AttentionConfig(d_model=8, n_heads=4, n_kv_heads=2, head_dim=3, value_dim=5, bias="kq",
                        causal=True)
    d = c.to_dict()
    assert d["bias"] == "qk" and d["head_dim"] == 3
    assert AttentionConfig.from_dict(d) == c
    assert json.loads(json.dumps(d)) == d                     # JSON-serialisable


# (keyword arguments, exact text the message must contain): one case per rule
BAD = [
    # integers
    (dict(d_model=8.0), "d_model=8.0 must be an integer"),
    (dict(d_model=True), "d_model=True must be an integer"),
    (dict(d_model="8"), "d_model='8' must be an integer"),
    (dict(d_model=0), "d_model=0 must be at least 1"),
    (dict(d_model=-4), "d_model=-4 must be at least 1"),
    (dict(d_model=8, n_heads=2.5), "n_heads=2.5 must be an integer"),
    (dict(d_model=8, n_heads=0), "n_heads=0 must be at least 1"),
    (dict(d_model=8, n_heads=2, n_kv_heads=0), "n_kv_heads=0 must be at least 1"),
    (dict(d_model=8, n_heads=2, n_kv_heads=1.0), "n_kv_heads=1.0 must be an integer"),
    # grouping
    (dict(d_model=8, n_heads=4, n_kv_heads=3), "n_heads=4 must be divisible by n_kv_heads=3"),
    (dict(d_model=8, n_heads=2, n_kv_heads=4), "n_heads=2 must be divisible by n_kv_heads=4"),
    # head widths
    (dict(d_model=10, n_heads=3),
     "d_model=10 must be divisible by n_heads=3 when head_dim is not given"),
    (dict(d_model=8, head_dim=0), "head_dim=0 must be at least 1"),
    (dict(d_model=8, head_dim=2.0), "head_dim=2.0 must be an integer"),
    (dict(d_model=8, value_dim=-1), "value_dim=-1 must be at least 1"),
    (dict(d_model=8, value_dim="4"), "value_dim='4' must be an integer"),
    # RoPE
    (dict(d_model=8, rope_fraction="half"), "rope_fraction='half' must be a number in [0, 1]"),
    (dict(d_model=8, rope_fraction=True), "rope_fraction=True must be a number in [0, 1]"),
    (dict(d_model=8, rope_fraction=1.5), "rope_fraction=1.5 must be in [0, 1]"),
    (dict(d_model=8, rope_fraction=-0.25), "rope_fraction=-0.25 must be in [0, 1]"),
    (dict(d_model=8, rope_fraction=math.nan), "rope_fraction=nan must be in [0, 1]"),
    (dict(d_model=8, n_heads=2, rope_fraction=0.25),
     "rope_fraction=0.25 times head_dim=4 = 1 must be an even integer (RoPE rotates pairs of dimensions)"),
    (dict(d_model=16, rope_fraction=0.3),
     "rope_fraction=0.3 times head_dim=16 = 4.8 must be an even integer"),
    (dict(d_model=8, rope_base=0), "rope_base=0 must be a positive finite number"),
    (dict(d_model=8, rope_base=-10.0), "rope_base=-10.0 must be a positive finite number"),
    (dict(d_model=8, rope_base=math.inf), "rope_base=inf must be a positive finite number"),
    (dict(d_model=8, rope_base="1e4"), "rope_base='1e4' must be a positive finite number"),
    (dict(d_model=8, rope_base=True), "rope_base=True must be a positive finite number"),
    # biases, mask
    (dict(d_model=8, bias=["q"]), "bias=['q'] must be a string of letters from 'qkvo'"),
    (dict(d_model=8, bias="qx"), "bias='qx' may contain only the letters q, k, v, o (got 'x')"),
    (dict(d_model=8, bias="QK"), "bias='QK' may contain only the letters q, k, v, o (got 'KQ')"),
    (dict(d_model=8, bias="qq"), "bias='qq' repeats a letter"),
    (dict(d_model=8, causal=1), "causal=1 must be true or false"),
    (dict(d_model=8, causal="yes"), "causal='yes' must be true or false"),
    # sizes beyond what a count can mean, numbers beyond the float range
    (dict(d_model=2 ** 53 + 1), "d_model=9007199254740993 must be at most 2**53 = 9007199254740992"),
    (dict(d_model=10 ** 309), "d_model=<an integer of 1027 bits> must be at most 2**53"),
    (dict(d_model=8, rope_base=10 ** 400), "rope_base=<an integer of 1329 bits> must be a positive"),
    (dict(d_model=8, n_layers=0), "n_layers=0 must be at least 1"),
    (dict(d_model=8, qk_norm=None), "qk_norm=None must be one of none, plain, gain"),
    (dict(d_model=8, kv_latent=2.0), "kv_latent=2.0 must be an integer"),
]


@pytest.mark.parametrize("kw, message", BAD, ids=[m for _, m in BAD])
def test_every_rule_refuses_with_its_message(kw, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        AttentionConfig(**kw)


def test_config_error_is_a_value_error_with_one_line():
    with pytest.raises(ValueError) as e:
        AttentionConfig(d_model=10, n_heads=3)
    assert "\n" not in str(e.value)


def test_accepted_edge_values():
    assert AttentionConfig(d_model=1).head_dim == 1
    assert AttentionConfig(d_model=8, rope_fraction=0).rotary_dim == 0
    assert AttentionConfig(d_model=8, rope_fraction=1).rope_fraction == 1.0       # int accepted
    assert AttentionConfig(d_model=6, head_dim=6, rope_fraction=1 / 3).rotary_dim == 2
    assert AttentionConfig(d_model=4, head_dim=6).head_dim == 6                 # k > d without RoPE
    assert AttentionConfig(d_model=8, rope_base=1).rope_base == 1.0


# -- from_dict / from_file ------------------------------------------------------------------

def test_from_dict_refuses_unknown_and_missing_fields():
    with pytest.raises(ConfigError, match=re.escape("config: unknown field 'heads'")):
        AttentionConfig.from_dict({"d_model": 8, "heads": 2})
    with pytest.raises(ConfigError, match=re.escape("config: field 'd_model' is required")):
        AttentionConfig.from_dict({"n_heads": 2})
    with pytest.raises(ConfigError, match="must be a JSON object"):
        AttentionConfig.from_dict([8, 2])


def test_from_file_attention_config_fields(tmp_path):
    p = tmp_path / "layer.json"
    p.write_text(json.dumps({"d_model": 8, "n_heads": 4, "n_kv_heads": 2, "rope_fraction": 1.0,
                             "bias": "vqk", "causal": True}))
    c = config_from_file(p)
    assert c == AttentionConfig(d_model=8, n_heads=4, n_kv_heads=2, rope_fraction=1.0,
                                bias="qkv", causal=True)
    assert config_from_file(str(p)) == c             # str paths too


@pytest.mark.parametrize("text, message", [
    ('{"d_model": 8,', "not valid JSON (line 1, column"),
    ("", "not valid JSON"),
    ("[8, 2]", "must be a JSON object of AttentionConfig fields"),
    ('{"d_model": 8, "frob": 1}', "unknown field 'frob'"),
    ('{"d_model": 8.5}', "d_model=8.5 must be an integer"),
])
def test_from_file_refusals(tmp_path, text, message):
    p = tmp_path / "c.json"
    p.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        config_from_file(p)


def test_from_file_missing(tmp_path):
    with pytest.raises(ConfigError, match=re.escape("cannot be read (No such file or directory)")):
        config_from_file(tmp_path / "absent.json")


def test_read_json_reads_pipes_once_and_refuses_other_files(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text('{"d_model": 8}'))
    writer.start()
    assert read_json(fifo) == ({"d_model": 8}, "pipe")
    writer.join()
    with pytest.raises(ConfigError, match="'zero': not a regular file or a pipe"):
        read_json("/dev/zero")
    with pytest.raises(ConfigError, match=re.escape("config file path is empty")):
        read_json("")
    with pytest.raises(ConfigError, match="cannot be read"):
        read_json(tmp_path)                                   # a directory
    big = tmp_path / "big.json"
    big.write_text(" " * MAX_CONFIG_BYTES + "{}")
    with pytest.raises(ConfigError, match=f"larger than {MAX_CONFIG_BYTES} bytes"):
        read_json(big)
    with pytest.raises(ConfigError, match="must be a path"):
        read_json([1])


def test_numpy_scalars_are_their_python_values():
    c = AttentionConfig(d_model=np.int64(16), n_heads=np.int32(4), rope_fraction=np.float32(0.5),
                        rope_base=np.float64(100.0), causal=np.bool_(True), bias=np.str_("qk"))
    assert c == AttentionConfig(d_model=16, n_heads=4, rope_fraction=0.5, rope_base=100.0,
                                causal=True, bias="qk")
    assert type(c.d_model) is int and type(c.causal) is bool and type(c.rope_fraction) is float
    with pytest.raises(ConfigError, match=re.escape("d_model=1.5 must be an integer")):
        AttentionConfig(d_model=np.float64(1.5))
    with pytest.raises(ConfigError, match=re.escape("causal=1 must be true or false")):
        AttentionConfig(d_model=4, causal=np.int8(1))


def test_replace_derives_again_what_was_not_given():
    c = AttentionConfig(d_model=16, n_heads=2)
    assert (c.n_kv_heads, c.head_dim, c.value_dim) == (2, 8, 8)
    c4 = c.replace(n_heads=4)
    assert (c4.n_kv_heads, c4.head_dim, c4.value_dim) == (4, 4, 4)     # multi-head defaults again
    assert c4 == AttentionConfig(d_model=16, n_heads=4)
    g = AttentionConfig(d_model=16, n_heads=4, n_kv_heads=2, head_dim=8)
    g8 = g.replace(n_heads=8)
    assert (g8.n_kv_heads, g8.head_dim, g8.value_dim) == (2, 8, 8)     # explicit values kept
    assert g8.replace(d_model=32).head_dim == 8
    assert "value_dim" not in g.explicit() and g.explicit()["head_dim"] == 8
    assert c.replace(head_dim=None, n_heads=8).head_dim == 2           # None: derive it


def test_from_hf_refuses_what_is_not_a_config():
    with pytest.raises(ConfigError, match="must be a"):
        config_from_hf([1])
    with pytest.raises(ConfigError, match="must be a JSON object"):
        AttentionConfig.from_dict([1])


def test_every_field_has_a_rule_and_none_passes_unchecked():
    names = [f.name for f in dataclasses.fields(AttentionConfig)]
    assert list(RULES) == names
    for name in names:                     # a list is never a valid value of any field
        kw = {"d_model": 8, name: [1]}
        with pytest.raises(ConfigError, match=re.escape(f"{name}=[1] must be")):
            AttentionConfig(**kw)
