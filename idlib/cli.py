"""``python -m idlib``: closed-form counts (``count``) and their check by Jacobian rank (``verify``).

A thin layer: parse the arguments, build an :class:`~idlib.config.AttentionConfig`, call
:func:`idlib.counting.count` (and :func:`idlib.rank.measure`), print.  Exit codes: 0 success,
1 ``verify`` disagrees with the closed form or its rank is not certified, 2 bad input (one line
``idlib: error: ...`` on stderr, never a traceback).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import fields
from fractions import Fraction
from pathlib import Path
from typing import Any, NoReturn, Sequence

from .config import AttentionConfig, ConfigError

PROG = "idlib"
DEFAULT_MAX_PARAMS = 6000           # dense route: a ~1.25 N x N Jacobian and its SVD
STRUCTURED_MAX_PARAMS = 20000       # where idlib.fastrank applies (never forms the Jacobian)
DEFAULT_ATTEMPTS = 8
DEFAULT_SPREAD_FROM = 4

EPILOG = """\
exit codes: 0 success; 1 verify disagrees with the closed form or the rank is not certified;
2 bad input (one line 'idlib: error: ...' on stderr).

--config FILE holds either AttentionConfig fields ({"d_model": 16, "n_heads": 4, ...}) or a
Hugging Face config.json. Flags override what the file says; sizes the file leaves to their
defaults (n_kv_heads = heads, head_dim = d_model / heads, value_dim = head_dim) are derived
after the flags are applied, so '--config llama.json --heads 16' re-derives head_dim.

JSON output (--json): one object with total, identified, unidentified (integers), ratio
(unidentified / total, a float), components (name -> total / identified / unidentified) and
config (the resolved AttentionConfig fields). verify adds seed, numerical {identified,
unidentified, rank, n_params, n_rows, gap, log10_gap, certified, seed, attempts} and agrees.
gap is sigma_r / max(sigma_(r+1), tau) at the rank cut, tau = sigma_1 max(rows, P) eps the
round-off tolerance (a lower bound on it for the structured route); it is null when infinite
(a zero Jacobian), and log10_gap is then null too. A rank is certified when gap >= 1e4.
An uncertified measurement is repeated at the next seed, up to --attempts measurements in
all (one certified generic point fixes the generic rank); numerical.seed is the seed of the
reported measurement and numerical.attempts lists every try {seed, qk_scale, rank, gap,
certified}; from the --spread-from-th measurement on, the random point has its query and key
weights doubled (qk_scale 2: another generic point, with wider-spread scores).
"""


class UsageError(Exception):
    """Bad command-line input (exit code 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse, but errors raise (one line, exit 2 in main) instead of printing usage."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _add_config_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("the attention layer (flags override --config)")
    g.add_argument("--config", metavar="FILE",
                   help="JSON file: AttentionConfig fields or a Hugging Face config.json")
    g.add_argument("--d-model", type=int, metavar="D", dest="d_model", help="model width d")
    g.add_argument("--heads", type=int, metavar="H", dest="n_heads", help="query heads (default 1)")
    g.add_argument("--kv-heads", type=int, metavar="G", dest="n_kv_heads",
                   help="key/value heads, dividing H (default H; 1 = multi-query)")
    g.add_argument("--head-dim", type=int, metavar="K", dest="head_dim",
                   help="query/key width per head (default d / H)")
    g.add_argument("--value-dim", type=int, metavar="V", dest="value_dim",
                   help="value width per head (default K)")
    g.add_argument("--rope-fraction", type=float, metavar="F", dest="rope_fraction",
                   help="share of each query/key head rotated by RoPE, F*K even (default 0)")
    g.add_argument("--rope-base", type=float, metavar="B", dest="rope_base",
                   help="RoPE base, theta_i = B^(-2i/r) (default 10000)")
    g.add_argument("--bias", metavar="LETTERS", dest="bias",
                   help="biases on a subset of q, k, v, o, e.g. qkv ('' or none: no biases)")
    g.add_argument("--causal", action=argparse.BooleanOptionalAction, default=None,
                   help="causal mask (--no-causal overrides a file)")
    v = p.add_argument_group("variants (chapter 7)")
    v.add_argument("--qk-norm", choices=("none", "plain", "gain"), dest="qk_norm",
                   help="RMS-normalise each head's queries and keys; gain: with learned gains "
                        "shared by the heads (default none)")
    v.add_argument("--kv-latent", type=int, metavar="C", dest="kv_latent",
                   help="keys and values from a shared C-dim latent (multi-head latent attention)")
    v.add_argument("--latent-norm", action=argparse.BooleanOptionalAction, default=None,
                   dest="latent_norm", help="RMS-normalise the latent (needs --kv-latent)")
    v.add_argument("--input-centered", action=argparse.BooleanOptionalAction, default=None,
                   dest="input_centered", help="inputs with zero mean over features (LayerNorm'd)")
    v.add_argument("--layers", type=int, metavar="L", dest="n_layers",
                   help="a stack of L residual layers x + attn(x) (default 1)")
    v.add_argument("--kv-share", type=int, metavar="S", dest="kv_share",
                   help="each run of S consecutive layers shares its K/V projections (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
                     description="Identified and unidentified parameters of one attention layer: "
                                 "closed form (count) and Jacobian-rank check (verify).",
                     epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", metavar="{count,verify,census}", parser_class=_Parser)
    p_count = sub.add_parser("count", help="closed-form count by component",
                             formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    _add_config_options(p_count)
    p_verify = sub.add_parser("verify", help="count, then measure the Jacobian rank and compare",
                              formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    _add_config_options(p_verify)
    p_verify.add_argument("--seed", type=int, default=0, metavar="S",
                          help="seed of the random parameters and inputs (default 0)")
    p_verify.add_argument("--attempts", type=int, default=DEFAULT_ATTEMPTS, metavar="N",
                          help="if the rank is not certified, measure again at seeds S+1, S+2, ... "
                               f"(at most N measurements in all; default {DEFAULT_ATTEMPTS})")
    p_verify.add_argument("--spread-from", type=int, default=DEFAULT_SPREAD_FROM, metavar="I",
                          help="from the I-th retry on (0 = the first measurement) double the "
                               "query/key weights of the random point, which conditions layers "
                               f"of many tiny heads far better (default {DEFAULT_SPREAD_FROM})")
    p_verify.add_argument("--max-params", type=int, default=None, metavar="N",
                          help="refuse to measure layers with more parameters (default "
                               f"{STRUCTURED_MAX_PARAMS} where the structured rank engine applies, "
                               f"else {DEFAULT_MAX_PARAMS}: a ~1.25 N x N dense Jacobian)")
    p_census = sub.add_parser("census", help="the census of published models (chapter 8)")
    p_census.add_argument("--json", action="store_true", help="print one JSON list of rows")
    return parser


# -- building the config -------------------------------------------------------------------

FIELD_NAMES = tuple(f.name for f in fields(AttentionConfig))
FLAG_OF = {"d_model": "--d-model", "n_heads": "--heads", "n_kv_heads": "--kv-heads",
           "head_dim": "--head-dim", "value_dim": "--value-dim", "rope_fraction": "--rope-fraction",
           "rope_base": "--rope-base", "bias": "--bias", "causal": "--causal",
           "qk_norm": "--qk-norm", "kv_latent": "--kv-latent", "latent_norm": "--latent-norm",
           "input_centered": "--input-centered", "n_layers": "--layers", "kv_share": "--kv-share"}


def _explicit_file_fields(path: str) -> dict[str, Any]:
    """The AttentionConfig fields a config file sets explicitly (None = left to its default).

    AttentionConfig.from_file validates the file first (its errors are the messages shown).
    """
    from .hf import approximation_note, attention_fields_from_hf

    try:
        AttentionConfig.from_file(path)
        approximate = False
    except ConfigError as refusal:
        try:
            note = approximation_note(json.loads(Path(path).read_text()))
        except (OSError, ValueError):
            raise refusal from None
        if note is None:
            raise
        print(f"{PROG}: note: {Path(path).name} is counted approximately: {note}", file=sys.stderr)
        approximate = True
    data = json.loads(Path(path).read_text())
    if set(data) <= set(FIELD_NAMES):          # from_file read it as AttentionConfig fields
        return dict(data)
    fields_ = attention_fields_from_hf(data, Path(path).name, approximate)
    return {k: v for k, v in fields_.items() if v is not None}


def config_from_args(args: argparse.Namespace) -> AttentionConfig:
    """The layer the arguments describe (raises ConfigError / UsageError on bad input)."""
    values: dict[str, Any] = {}
    if args.config is not None:
        try:
            values = _explicit_file_fields(args.config)
        except ConfigError:
            raise
        except Exception as e:  # a malformed file must still give one line, not a traceback
            raise ConfigError(f"config file {args.config!r}: cannot be interpreted "
                              f"({type(e).__name__}: {e})") from None
    for name in FLAG_OF:
        value = getattr(args, name)
        if value is not None:
            values[name] = value
    if isinstance(values.get("bias"), str) and values["bias"].strip().lower() in ("none", "-"):
        values["bias"] = ""
    if "d_model" not in values:
        raise UsageError("the model width is required: give --d-model D or --config FILE")
    return AttentionConfig(**values)


# -- output --------------------------------------------------------------------------------

def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def count_report(config: AttentionConfig) -> dict[str, Any]:
    from .counting import count

    c = count(config)
    out = c.to_dict()
    out["config"] = config.to_dict()
    return out


def verify_report(config: AttentionConfig, seed: int, attempts: int = 1,
                  spread_from: int | None = None) -> dict[str, Any]:
    from .studies.sweep import measure_until_certified

    out = count_report(config)
    m, tries = measure_until_certified(config, seed, attempts, spread_from)
    gap = _finite_or_none(m.gap)
    out["seed"] = seed
    out["numerical"] = {"identified": m.rank, "unidentified": m.unidentified, "rank": m.rank,
                        "n_params": m.n_params, "n_rows": m.n_rows, "gap": gap,
                        "log10_gap": None if gap is None else (math.log10(gap) if gap > 0 else None),
                        "certified": bool(m.certified), "seed": tries[-1]["seed"],
                        "attempts": [dict(t, gap=_finite_or_none(t["gap"])) for t in tries]}
    out["agrees"] = bool(m.certified and m.n_params == out["total"] and m.rank == out["identified"])
    return out


def _config_line(config: AttentionConfig) -> str:
    d = config.to_dict()
    return "AttentionConfig(" + ", ".join(f"{k}={v!r}" for k, v in d.items()) + ")"


def format_count(report: dict[str, Any]) -> str:
    rows = [(name, c["total"], c["identified"], c["unidentified"])
            for name, c in report["components"].items()]
    rows.append(("total", report["total"], report["identified"], report["unidentified"]))
    w = max(12, *(len(str(x)) for r in rows for x in r[1:]))
    lines = [f"{'component':<10} {'total':>{w}} {'identified':>{w}} {'unidentified':>{w}}"]
    for i, (name, t, idf, un) in enumerate(rows):
        if i == len(rows) - 1:
            lines.append("-" * len(lines[0]))
        lines.append(f"{name:<10} {t:>{w}} {idf:>{w}} {un:>{w}}")
    frac = Fraction(report["unidentified"], report["total"])
    lines.append(f"unidentified ratio {report['ratio']:.6f} (= {frac})")
    return "\n".join(lines)


def _scale_note(attempt: dict[str, Any]) -> str:
    return "" if attempt["qk_scale"] == 1.0 else f", query/key weights x{attempt['qk_scale']:g}"


def format_verify(report: dict[str, Any]) -> str:
    from .rank import CERTIFY_GAP
    n = report["numerical"]
    gap = "inf" if n["gap"] is None else f"{n['gap']:.3e}"
    status = "certified" if n["certified"] else f"NOT certified (gap < {CERTIFY_GAP:g})"
    verdict = "AGREES" if report["agrees"] else "DISAGREES"
    return "\n".join([
        format_count(report), "",
        *[f"seed {t['seed']}{_scale_note(t)}: rank {t['rank']}, gap "
          f"{'inf' if t['gap'] is None else format(t['gap'], '.3e')}, NOT certified"
          for t in n["attempts"][:-1]],
        f"measured (seed {n['seed']}{_scale_note(n['attempts'][-1])}): "
        f"Jacobian {n['n_rows']} x {n['n_params']}, "
        f"rank {n['rank']}, gap {gap}, {status}",
        f"{'':<10} {'closed form':>12} {'measured':>12}",
        f"{'identified':<12} {report['identified']:>10} {n['identified']:>12}",
        f"{'unidentified':<12} {report['unidentified']:>10} {n['unidentified']:>12}",
        f"verdict: {verdict}"])


# -- entry point ---------------------------------------------------------------------------

def _fail(message: str) -> int:
    print(f"{PROG}: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            raise UsageError("a command is required: count, verify or census (see --help)")
        if args.command == "census":
            from .studies.census import census_rows, format_census
            rows = census_rows()
            print(json.dumps(rows, allow_nan=False) if args.json else format_census(rows))
            return 0
        config = config_from_args(args)
        if args.command == "verify":
            from .attention import n_params
            from .fastrank import applicable
            if args.max_params is None:
                args.max_params = (STRUCTURED_MAX_PARAMS if applicable(config) is None
                                   else DEFAULT_MAX_PARAMS)
            if args.max_params < 1:
                raise UsageError(f"--max-params={args.max_params} must be at least 1")
            if args.attempts < 1:
                raise UsageError(f"--attempts={args.attempts} must be at least 1")
            if args.spread_from < 0:
                raise UsageError(f"--spread-from={args.spread_from} must be at least 0")
            if n_params(config) > args.max_params:
                dense = (f"measuring it densely needs a ~{1.25 * n_params(config) ** 2 * 8 / 1e9:.1f} GB"
                         " Jacobian" if applicable(config) else "the structured rank engine was "
                         "benchmarked up to 16,384 parameters")
                raise UsageError(
                    f"the layer has {n_params(config)} parameters, more than --max-params="
                    f"{args.max_params}; {dense} (raise --max-params to insist)")
    except (UsageError, ConfigError) as e:
        return _fail(str(e))

    if args.command == "count":
        report = count_report(config)
        print(json.dumps(report, allow_nan=False) if args.json else
              _config_line(config) + "\n" + format_count(report))
        return 0
    report = verify_report(config, args.seed, args.attempts, args.spread_from)
    print(json.dumps(report, allow_nan=False) if args.json else
          _config_line(config) + "\n" + format_verify(report))
    return 0 if report["agrees"] else 1
