"""Regression corpus of issue 15: hostile but fair input gets the right count or one clear line.

Command line (in-process through ``cli.main``): exit 2 with one ``idlib: error:`` line for bad
input, never a traceback, never a hang; the Python API raises ConfigError naming the argument.
"""
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest

from idlib import cli
from idlib.attention import n_params
from idlib.config import AttentionConfig, ConfigError
from idlib.counting import count, rotation_classes
from idlib.hf import config_from_hf
from idlib.rank import measure

DATA = Path(__file__).parent / "data"
BIG = "1" + "0" * 309                          # a width with 310 digits (beyond every float)


def _main(args, capsys):
    rc = cli.main(args)
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line(rc, out, err, message, code=2):
    assert (rc, out) == (code, ""), (rc, out, err)
    assert len(err.splitlines()) == 1 and err.startswith("idlib: error: "), err
    assert message in err, err


# (arguments, text of the one error line): each once a traceback, a hang or a wrong exit code
REFUSED = [
    (["count", "--d-model", BIG], "d_model=<an integer of 1027 bits> must be at most 2**53"),
    (["verify", "--d-model", "1" + "0" * 80, "--qk-norm", "gain"],
     "d_model=<an integer of 266 bits> must be at most 2**53"),
    (["verify", "--d-model", "4", "--seed", "18446744073709551616"],
     "--seed=18446744073709551616 must be in 0..9223372036854775807"),
    (["verify", "--d-model", "4", "--seed", "-1"], "--seed=-1 must be in 0.."),
    (["count", "--d-model", "1000000000000000002", "--rope-fraction", "0.5"],
     "d_model=1000000000000000002 must be at most 2**53 = 9007199254740992"),
    (["verify", "--d-model", "4096", "--heads", "32", "--input-centered", "--max-params",
      "1000000000000"], "measuring the layer's 67108864 parameters needs about"),
    (["count", "--config", "/dev/zero"], "config file 'zero': not a regular file or a pipe"),
    (["count", "--config", ""], "config file path is empty"),
    (["count", "--d-model", "8", "--rope-base", "1e400"], "rope_base=inf must be a positive finite"),
    (["count", "--d-model", "8", "--rope-fraction", "nan"], "rope_fraction=nan must be in [0, 1]"),
    (["count", "--d-model", "9" * 5000], "argument --d-model: invalid integer '9999"),
    (["verify", "--d-model", "4", "--head-dim", "6", "--rope-fraction", "1"],
     "head_dim=6 must be at most d_model=4 when rope_fraction > 0"),
    (["count", "--d-model", "8", "--layers", "2", "--bias", "v"], "value and output biases"),
]


@pytest.mark.parametrize("args, message", REFUSED, ids=[m[:40] for _, m in REFUSED])
def test_refused_in_one_line_fast(args, message, capsys):
    start = time.perf_counter()
    _one_line(*_main(args, capsys), message)
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize("error, code", [
    (MemoryError(), 3), (OverflowError("int too large to convert"), 2),
    (RuntimeError("DefaultCPUAllocator: can't allocate memory"), 3),
    (OSError(28, "No space left on device"), 3)])
def test_resource_errors_are_one_line(error, code, capsys, monkeypatch):
    """Bad input exits 2, the environment (memory, an unwritable output) 3: one line each."""
    def fail(config):
        raise error
    monkeypatch.setattr(cli, "count_report", fail)
    rc, out, err = _main(["count", "--d-model", "8"], capsys)
    assert (rc, out) == (code, "") and len(err.splitlines()) == 1 and err.startswith("idlib: error: ")


def test_ctrl_c_exits_130_in_one_line(capsys, monkeypatch):
    def interrupted(config):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "count_report", interrupted)
    rc, out, err = _main(["count", "--d-model", "8"], capsys)
    assert (rc, out, err) == (130, "", "idlib: interrupted\n")


def test_a_full_disk_exits_3_without_a_traceback():
    """The real thing: output to /dev/full (a device whose every write fails with ENOSPC)."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "idlib", "count", "--d-model", "16",
                               "--heads", "4"], stdout=full, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 3
    assert done.stderr == "idlib: error: cannot write the output (No space left on device)\n"


def test_a_number_longer_than_python_reads_is_bad_input(tmp_path, capsys):
    path = tmp_path / "huge.json"
    path.write_text('{"d_model": ' + "9" * 5000 + "}")
    rc, out, err = _main(["count", "--config", str(path)], capsys)
    assert (rc, out) == (2, "")
    assert err == ("idlib: error: config file 'huge.json': a number with more than 4300 digits; "
                   "no count can mean it\n")


def test_verify_leaves_no_compiler_cache_behind(tmp_path):
    """torch creates its compiler cache folder when torch.func runs; the command gives it a
    private temporary folder and removes it (nothing is left in the temporary folder)."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    done = subprocess.run([sys.executable, "-m", "idlib", "verify", "--d-model", "4", "--heads",
                           "2"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("d_model, heads, unidentified", [
    (16384, 1, 16384 ** 2 + 16384),            # one head, 8192 planes, all distinct: 2 r/2 + v^2
    (1048576, 1, 1048576 ** 2 + 1048576),      # 524,288 rotation planes (the 2 s bound)
    (65536, 4, 4 * (16384 ** 2 + 16384)),
])
def test_wide_rotary_heads_are_counted_in_closed_form(d_model, heads, unidentified, capsys):
    start = time.perf_counter()
    rc, out, err = _main(["count", "--d-model", str(d_model), "--heads", str(heads),
                          "--rope-fraction", "1", "--json"], capsys)
    assert time.perf_counter() - start < 2.0
    report = json.loads(out)
    assert rc == 0 and err == "" and report["unidentified"] == unidentified
    assert report["total"] == n_params(AttentionConfig(d_model=d_model, n_heads=heads, rope_fraction=1))


def test_a_billion_wide_rotary_head_is_counted():
    c = AttentionConfig(d_model=10 ** 9, rope_fraction=1.0)
    start = time.perf_counter()
    n = count(c)
    assert time.perf_counter() - start < 1.0
    # 5e8 planes: the low frequencies crowd closer than the tolerance and merge into classes
    assert n.total == 4 * 10 ** 18 and 10 ** 18 + 10 ** 9 < n.unidentified < 10 ** 18 + 10 ** 11


def test_config_through_pipes_is_read_once(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    text = (DATA / "small_gqa.json").read_text()
    writer = threading.Thread(target=fifo.write_text, args=(text,))
    writer.start()
    rc, out, err = _main(["count", "--config", str(fifo), "--json"], capsys)
    writer.join()
    assert rc == 0 and err == ""
    assert json.loads(out)["config"] == AttentionConfig(**json.loads(text)).to_dict()


def test_oversized_config_file_is_refused_unread(tmp_path, capsys):
    f = tmp_path / "huge.json"
    f.write_text("[" + "0," * (1 << 20) + "0]")
    _one_line(*_main(["count", "--config", str(f)], capsys), "larger than 1048576 bytes")


# -- the Python API ---------------------------------------------------------------------------

def test_numpy_scalars_count_as_python_values():
    c = AttentionConfig(d_model=np.int64(16), n_heads=np.int64(4), rope_fraction=np.float32(1.0),
                        causal=np.bool_(True))
    assert c == AttentionConfig(d_model=16, n_heads=4, rope_fraction=1.0, causal=True)


@pytest.mark.parametrize("kw, message", [
    (dict(d_model=8, rope_base=10 ** 400), "rope_base=<an integer of 1329 bits> must be a positive"),
    (dict(d_model=int(BIG)), "d_model=<an integer of 1027 bits> must be at most 2**53"),
    (dict(d_model=np.float32(8)), "d_model=8.0 must be an integer"),
])
def test_every_invalid_value_is_a_config_error(kw, message):
    with pytest.raises(ConfigError, match=message.replace("*", r"\*")):
        AttentionConfig(**kw)


def test_explicit_frequencies_must_match_the_planes():
    c = AttentionConfig(d_model=8, rope_fraction=1.0)                  # 4 planes
    with pytest.raises(ConfigError, match="99 given, the layer has rotary_dim / 2 = 4"):
        count(c, frequencies=[1.0] * 99)
    with pytest.raises(ConfigError, match="2 given, the layer has rotary_dim / 2 = 0"):
        count(AttentionConfig(d_model=8), frequencies=[1.0, 2.0])
    with pytest.raises(ConfigError, match="of finite real angles"):
        count(c, frequencies=[1.0, 2.0, float("nan"), 3.0])
    # four equal frequencies: one class of 4 planes, GL(4, C) = 32 dims, plus v^2 = 64
    assert count(c, frequencies=[1.0] * 4).unidentified == 2 * 4 ** 2 + 64
    assert rotation_classes([1.0, 1.0 + 2 * np.pi, -1.0, np.pi, 0.0], 1) == ([3], 3, 2)


@pytest.mark.parametrize("kw, message", [
    (dict(seq_len=0), "seq_len=0 must be an integer in [1, "),
    (dict(n_sequences=0), "n_sequences=0 must be an integer in [1, "),
    (dict(seed=2 ** 64), "seed=18446744073709551616 must be an integer in [0, "),
    (dict(seed=1.5), "seed=1.5 must be an integer"),
    (dict(seed="0"), "seed='0' must be an integer"),
])
def test_measure_names_the_bad_argument(kw, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        measure(AttentionConfig(d_model=4), **kw)


def test_from_hf_of_a_list_is_a_config_error():
    with pytest.raises(ConfigError):
        config_from_hf([1])


# -- make determinism: stream chunks are not differences ---------------------------------------

def _compare_outputs():
    spec = importlib.util.spec_from_file_location(
        "compare_outputs", Path(__file__).parents[1] / "benchmarks" / "compare_outputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_determinism_merges_stream_chunks_as_nbval_does(tmp_path, capsys):
    co = _compare_outputs()
    out = lambda name, text: nbformat.v4.new_output("stream", name=name, text=text)  # noqa: E731
    plot = nbformat.v4.new_output("display_data", data={"text/plain": "<Figure>"})
    one = [out("stdout", "a = 1\nb"), out("stderr", "w\n"), out("stdout", " = 2\n"), plot]
    other = [out("stdout", "a = 1\n"), out("stderr", "w\n"), out("stdout", "b = 2\n"), plot]
    for run, outputs in (("run1", one), ("run2", other)):
        (tmp_path / run).mkdir()
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print()", outputs=outputs)])
        nbformat.write(nb, tmp_path / run / "ch.ipynb")
    assert co.main([str(tmp_path / "run1"), str(tmp_path / "run2")]) == 0
    assert "identical text outputs" in capsys.readouterr().out
    nb = nbformat.read(tmp_path / "run2" / "ch.ipynb", as_version=4)
    nb.cells[0].outputs[2]["text"] = "b = 3\n"                     # a real difference is still one
    nbformat.write(nb, tmp_path / "run2" / "ch.ipynb")
    assert co.main([str(tmp_path / "run1"), str(tmp_path / "run2")]) == 1
    assert "run2: b = 3" in capsys.readouterr().out
    assert co.coalesce_streams([out("stdout", "10%\r100%\nab\x08c\n")])[0]["text"] == "100%\nac\n"


def test_a_rope_base_below_one_on_a_huge_head_counts_in_seconds():
    """Angles above 1 wrap: 2**22 planes are tabulated and grouped (formerly a Python loop over
    every plane: 44 CPU s). The angles reach 1e6, where one unit in the last place is 1.2e-10
    rad, so which of the ~5,000 pairs closer than the tolerance fall inside it depends on how
    pow rounds: the count is the one the C library's pow gives, as torch's scalar kernels do
    (tests/test_fibers_without_torch.py); torch's AVX2 kernels, which counted until idlib
    counted without torch, round differently and put one more pair in a class (...732)."""
    start = time.process_time()
    c = count(AttentionConfig(d_model=1 << 23, n_heads=1, rope_fraction=1.0, rope_base=1e-6))
    assert c.unidentified == 70368752588728
    assert time.process_time() - start < 15
    # the split of near-equal angles: planes 0.1, 0.1 + 0.6 d, 0.1 + 1.2 d, ... chain within DELTA
    # of their neighbours; classes are cut at DELTA from the head of each, the largest angle first
    from idlib.fibers import ROTATION_TOL, _delta
    d = _delta(ROTATION_TOL)
    assert rotation_classes([0.1 + 0.6 * d * i for i in range(5)] + [2.0], 0) == ([1, 2, 2, 1], 0, 0)
