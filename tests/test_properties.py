"""Property-based tests (Hypothesis) over configurations and command lines.

For every generated valid layer: ``count`` is fast, its total is the parameter count of the
forward pass (``n_params``), its parts add up, and the config survives JSON and the command
line.  For every generated invalid input: exit 2 and exactly one ``idlib: error:`` line.
Derandomized (the same examples every run) and small, so the unit step stays fast.
"""
import contextlib
import io
import json
import time

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from idlib import cli
from idlib.attention import n_params
from idlib.config import MAX_SIZE, AttentionConfig, ConfigError
from idlib.counting import count

PROPERTY = settings(max_examples=60, deadline=2000, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(argv)
    return rc, out.getvalue(), err.getvalue()


@st.composite
def layers(draw, max_d: int = 64) -> AttentionConfig:
    """A valid layer whose count is derived (drawn fields; the rest left to their defaults)."""
    d = draw(st.integers(1, max_d))
    H = draw(st.integers(1, 8))
    G = draw(st.sampled_from([g for g in range(1, H + 1) if H % g == 0]))
    k = draw(st.none() | st.integers(1, 2 * d))
    kk = k if k is not None else (d // H if d % H == 0 else 1)
    r = 2 * draw(st.integers(0, kk // 2))
    fields = dict(d_model=d, n_heads=H, n_kv_heads=G, head_dim=k,
                  value_dim=draw(st.none() | st.integers(1, 2 * d)),
                  rope_fraction=r / kk if r else 0.0,
                  rope_base=draw(st.sampled_from([1.0, 100.0, 10000.0, 500000.0, 1e8])),
                  bias=draw(st.sampled_from(["", "q", "k", "v", "o", "qk", "kv", "qkv", "qkvo", "vo"])),
                  causal=draw(st.booleans()),
                  qk_norm=draw(st.sampled_from(["none", "none", "plain", "gain"])),
                  kv_latent=draw(st.none() | st.integers(1, d + 2)),
                  input_centered=draw(st.booleans()))
    fields["latent_norm"] = fields["kv_latent"] is not None and draw(st.booleans())
    if fields["kv_latent"] is None and not fields["input_centered"] and "v" not in fields["bias"] \
            and "o" not in fields["bias"]:
        S = draw(st.integers(1, 2))
        fields.update(n_layers=S * draw(st.integers(1, 2)), kv_share=S)
    try:
        config = AttentionConfig(**fields)
        count(config)
    except ConfigError:
        assume(False)
    return config


@PROPERTY
@given(layers())
def test_count_is_exact_and_fast(config):
    start = time.perf_counter()
    c = count(config)
    assert time.perf_counter() - start < 0.5
    assert c.total == n_params(config)
    assert 0 <= c.unidentified < c.total and c.identified == c.total - c.unidentified
    assert sum(p.total for p in c.components) == c.total
    assert all(0 <= p.unidentified <= p.total for p in c.components)


@PROPERTY
@given(layers())
def test_config_round_trips_through_json_and_the_command_line(config):
    data = json.loads(json.dumps(config.to_dict()))
    assert AttentionConfig.from_dict(data) == config == config.replace()
    argv = ["count", "--json"]
    for name, flag in cli.FLAG_OF.items():
        value = getattr(config, name)
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        elif value is not None:
            argv += [flag + "=" + str(value)]     # '=' keeps an empty bias a value
    rc, out, err = _run(argv)
    assert (rc, err) == (0, "")
    report = json.loads(out)
    assert report["config"] == config.to_dict()
    assert report["total"] == count(config).total and report["unidentified"] == count(config).unidentified


@PROPERTY
@given(st.integers(0, 6).flatmap(lambda e: st.tuples(st.just(2 ** e), st.integers(1, MAX_SIZE >> e))))
def test_any_width_counts_instantly(heads_and_k):
    """Any width up to 2**53, 1..64 heads (full RoPE when the head is even): exact integers."""
    H, k = heads_and_k
    d = H * k
    config = AttentionConfig(d_model=d, n_heads=H, rope_fraction=1.0 if k % 2 == 0 else 0.0)
    start = time.process_time()
    try:
        c = count(config)
    except ConfigError as e:                 # crowded frequencies beyond what is walked: refused
        assert "is not computed" in str(e)
        return
    assert time.process_time() - start < 0.5
    assert c.total == 4 * d * d == n_params(config)
    assert H * k * k <= c.unidentified <= 2 * H * k * k


# -- invalid input: exit 2, exactly one line --------------------------------------------------

BAD_VALUES = {  # flag -> values that break its rule on their own
    "--d-model": ["0", "-3", str(MAX_SIZE + 1), "1e3", "x", "", "8.5", "1" + "0" * 400],
    "--heads": ["0", "-1", "2.0", "two"],
    "--rope-fraction": ["1.5", "-0.1", "nan", "inf", "0.3", "a"],
    "--rope-base": ["0", "-1", "inf", "1e999", "nan", "b"],
    "--bias": ["x", "qq", "QK", "qkvoq"],
    "--qk-norm": ["rms", "", "NONE"],
    "--kv-latent": ["0", "-2", "3.5"],
    "--layers": ["0", "x"],
    "--config": ["", "/dev/zero", "/nonexistent/c.json", "/"],
}


@PROPERTY
@given(st.sampled_from(sorted(BAD_VALUES)).flatmap(
    lambda flag: st.tuples(st.just(flag), st.sampled_from(BAD_VALUES[flag]))),
    st.sampled_from(["count", "verify"]))
def test_every_invalid_value_is_one_line_and_exit_2(flag_value, command):
    flag, value = flag_value
    argv = [command] + ([] if flag in ("--d-model", "--config") else ["--d-model", "8"])
    rc, out, err = _run(argv + [flag + "=" + value])
    assert (rc, out) == (2, ""), err
    assert len(err.splitlines()) == 1 and err.startswith("idlib: error: ")


TOKENS = ["count", "verify", "census", "--json", "--d-model", "--heads", "--kv-heads", "--head-dim",
          "--rope-fraction", "--bias", "--causal", "--no-causal", "--qk-norm", "--layers",
          "--kv-share", "--seed", "--attempts", "--max-params", "--config", "--frob",
          "0", "1", "2", "3", "-1", "0.5", "1e400", "qkv", "plain", "x", "", "99999999999999999999"]


@PROPERTY
@given(st.lists(st.sampled_from(TOKENS), max_size=6))
def test_any_command_line_exits_0_or_2_in_one_line(argv):
    """Random token soup: success, or exactly one error line with exit 2 (never a traceback)."""
    if argv[:1] == ["verify"] or argv[:1] == ["census"]:
        argv = ["count"] + argv[1:]              # keep it fast: measuring is tested elsewhere
    rc, out, err = _run(argv)
    if rc == 0:
        assert err == "" and out
    else:
        assert (rc, out) == (2, "") and len(err.splitlines()) == 1 and err.startswith("idlib: error: ")
