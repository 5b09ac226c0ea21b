"""A null num_key_value_heads or head_dim, and the fields a family's code does not read, are read
as each family's transformers code reads them: measured on the code itself (its config class and
attention module), not assumed from one family."""

import warnings

import pytest

from idlib.attention import n_params
from idlib.config import ConfigError
from idlib.hf import FAMILIES, config_from_hf, ignored_fields, model_from_hf
from idlib.implementations import modules

CASES = [(fam, field) for fam, spec in sorted(modules.SPECS.items()) if not spec.latent
         for field in ("num_key_value_heads", "head_dim")]


def _module_of(family: str, data: dict):
    """The family's attention module built from the config dict, or the error its code raises."""
    cls = getattr(modules._transformers(), modules.SPECS[family].config_class)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            cfg = cls.from_dict(data)
            model = model_from_hf(cfg.to_dict())
            layer = model.counted[0].layers[0] if model.counted else 0
            return modules._module(family, cfg, layer)[0], layer
        except Exception as e:       # noqa: BLE001 - any failure of their code counts as refusal
            return e, None


@pytest.mark.parametrize("family, field", CASES, ids=str)
def test_a_null_field_is_read_as_the_code_reads_it(family, field):
    base = modules.hf_config(family, 64, 8, 2 if FAMILIES[family].reads_kv else None, 8).to_dict()
    data = {**base, field: None}
    module, layer = _module_of(family, data)
    if isinstance(module, Exception):
        with pytest.raises(ConfigError, match=rf"field '{field}'(: this family's config class| is null)"):
            model_from_hf(data)
        return
    config = model_from_hf(data).layer(layer).config
    assert n_params(config) == sum(p.numel() for name, p in module.named_parameters()
                                   if "LayerNorm" not in name)     # BERT's output norm


def test_fields_a_family_does_not_read_are_listed_not_counted():
    base = modules.hf_config("gpt2", 64, 4).to_dict()
    data = {**base, "num_key_value_heads": 2, "head_dim": 8}
    assert config_from_hf(data) == config_from_hf(base)
    assert ignored_fields(data) == ["num_key_value_heads", "head_dim"]
    assert model_from_hf(data).ignored == ("num_key_value_heads", "head_dim")
    assert ignored_fields(base) == []


@pytest.mark.parametrize("change, message", [
    ({"hidden_size": -64}, "field 'hidden_size'=-64 must be at least 1"),
    ({"num_key_value_heads": 0}, "field 'num_key_value_heads'=0 must be at least 1"),
    ({"num_attention_heads": 6, "num_key_value_heads": 3, "head_dim": None},
     "hidden_size=64 must be divisible by num_attention_heads=6 when head_dim is not given"),
    ({"num_attention_heads": 8, "num_key_value_heads": 3},
     "num_attention_heads=8 must be divisible by num_key_value_heads=3"),
    ({"n_embd": 128}, "fields 'hidden_size'=64 and 'n_embd'=128 name one size and disagree"),
    ({"num_heads": 8}, "fields 'num_attention_heads'=4 and 'num_heads'=8 name one size and disagree"),
])
def test_size_errors_name_the_file_field(change, message):
    data = {**modules.hf_config("mistral", 64, 4, 2).to_dict(), **change}
    with pytest.raises(ConfigError, match=message):
        config_from_hf(data)


def test_a_multimodal_config_with_a_width_of_its_own_reads_the_text_model():
    """PaliGemma's outer config carries hidden_size (the projector's): the text model is read."""
    data = modules._transformers().PaliGemmaConfig().to_dict()
    text = data["text_config"]
    assert data["hidden_size"] == text["hidden_size"] == 2048
    c = config_from_hf({**data, "hidden_size": 1024})
    assert (c.d_model, c.n_heads, c.n_kv_heads, c.head_dim) == (
        text["hidden_size"], text["num_attention_heads"], text["num_key_value_heads"], text["head_dim"])


def test_a_field_given_twice_is_refused(tmp_path):
    from idlib.config import read_json
    p = tmp_path / "config.json"
    p.write_text('{"model_type": "llama", "hidden_size": 64, "hidden_size": 128}')
    with pytest.raises(ConfigError, match="field 'hidden_size' appears twice"):
        read_json(p)


def test_aliases_that_transformers_lets_win_are_read_or_refused():
    """T5Config maps head_dim onto d_kv (the alias wins): read; disagreeing, refused; Falcon
    computes head_dim and refuses a file that sets it."""
    t5 = modules.hf_config("t5", 64, 4).to_dict()
    assert config_from_hf({**t5, "head_dim": t5["d_kv"]}).head_dim == t5["d_kv"] == 16
    del t5["d_kv"]
    assert config_from_hf({**t5, "head_dim": 8}).head_dim == 8
    with pytest.raises(ConfigError, match="fields 'head_dim'=8 and 'd_kv'=16 name one size"):
        config_from_hf({**t5, "head_dim": 8, "d_kv": 16})
    falcon = modules.hf_config("falcon", 64, 4).to_dict()
    with pytest.raises(ConfigError, match="field 'head_dim': this family's config class computes"):
        config_from_hf({**falcon, "head_dim": 16})


def test_the_cli_lists_the_fields_it_ignored(tmp_path, capsys):
    import json

    from idlib import cli
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**modules.hf_config("gpt2", 64, 4).to_dict(), "head_dim": 8}))
    assert cli.main(["count", "--config", str(p)]) == 0
    out = capsys.readouterr().out
    assert "ignored (not read by the family's transformers code): head_dim" in out
    assert cli.main(["count", "--config", str(p), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["ignored_fields"] == ["head_dim"]


@pytest.mark.parametrize("n_layers", [1, 2, 3])
def test_smollm3_with_fewer_than_four_layers_is_read(n_layers):
    """No no_rope_layers in the file: the config class's default marks every 4th layer, so
    fewer than four layers all rotate (the issue found these refused)."""
    data = modules.hf_config("smollm3", 64, 4, 2, num_hidden_layers=n_layers).to_dict()
    data.pop("no_rope_layers", None)
    model = model_from_hf(data)
    assert [t.layers for t in model.counted] == [tuple(range(n_layers))]
    assert model.counted[0].config.rotary_dim == 16
