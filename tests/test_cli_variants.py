"""The command line for the chapter 7 variants, the census, and the shipped model configs.

In-process through ``cli.main`` (tests/test_cli.py runs the one real ``python -m idlib``).
"""
import json
from pathlib import Path

import pytest

from idlib import cli
from idlib.config import AttentionConfig
from idlib.counting import count

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "idlib" / "data" / "configs").glob("*.json"))


@pytest.fixture
def run(capsys):
    """cli.main(args) in this process: (exit code, stdout, stderr)."""
    def _run(*args):
        rc = cli.main(list(args))
        out, err = capsys.readouterr()
        return rc, out, err
    return _run


@pytest.mark.parametrize("flags, fields", [
    (["--qk-norm", "gain"], dict(qk_norm="gain")),
    (["--qk-norm", "plain", "--rope-fraction", "1"], dict(qk_norm="plain", rope_fraction=1.0)),
    (["--kv-latent", "3", "--latent-norm"], dict(kv_latent=3, latent_norm=True)),
    (["--input-centered", "--bias", "qk"], dict(input_centered=True, bias="qk")),
    (["--layers", "2", "--kv-share", "2"], dict(n_layers=2, kv_share=2)),
], ids=str)
def test_variant_flags_reach_the_config_and_verify_agrees(run, flags, fields):
    rc, out, err = run("verify", "--d-model", "8", "--heads", "2", *flags, "--json")
    assert rc == 0, err
    report = json.loads(out)
    expected = count(AttentionConfig(d_model=8, n_heads=2, **fields))
    assert report["unidentified"] == expected.unidentified
    assert report["agrees"] and report["numerical"]["unidentified"] == expected.unidentified
    assert all(report["config"][k] == v for k, v in fields.items())


@pytest.mark.parametrize("flags, message", [
    (["--qk-norm", "bogus"], "argument --qk-norm: invalid choice: 'bogus'"),
    (["--layers", "3", "--kv-share", "2"], "kv_share=2 must divide n_layers=3"),
    (["--latent-norm"], "latent_norm=True needs kv_latent"),
    (["--kv-latent", "0"], "kv_latent=0 must be at least 1"),
], ids=str)
def test_bad_variant_input_is_one_line_and_exit_2(run, flags, message):
    rc, out, err = run("count", "--d-model", "6", "--heads", "2", *flags)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("idlib: error: ") and message in err


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_count_works_on_every_shipped_config(run, path):
    rc, out, err = run("count", "--config", str(path), "--json")
    assert rc == 0, err
    report = json.loads(out)
    assert report["identified"] + report["unidentified"] == report["total"] > 0
    assert err == ""


def test_census_command_prints_every_model(run):
    rc, out, err = run("census", "--json")
    assert rc == 0, err
    rows = json.loads(out)
    assert len(rows) == len(CONFIGS) >= 15
    rc, text, _ = run("census")
    assert rc == 0 and all(r["name"] in text for r in rows)
