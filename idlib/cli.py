"""``python -m idlib``: closed-form counts (``count``) and their check by Jacobian rank (``verify``).

A thin layer: parse the arguments, build an :class:`~idlib.config.AttentionConfig`, call
:func:`idlib.counting.count` (and :func:`idlib.verdict.measure_and_check`), print.  Exit
codes: 0 success, 1 ``verify`` disagrees with the closed form or its rank is not certified,
2 bad input.  Every failure is one line ``idlib: error: ...`` on stderr, never a traceback.

Flags are data: ``LAYER_FLAGS`` (one row per AttentionConfig field) and ``VERIFY_FLAGS`` define
every option once; add a row to add a flag.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
import tempfile
from fractions import Fraction
from typing import Any, NoReturn, Sequence

from .lazy import torch

from .attention import n_params
from . import blockrank, implementations
from .certify import CERTIFY_GAP, format_gap
from .config import (MAX_SEED, QK_NORMS, AttentionConfig, ConfigError, LatentAttentionConfig, check_fields,
                     read_json, show)
from .counting import count
from .hf import is_hf, model_from_data
from .model import LayerType, Model, count_model
from .arguments import available_memory, cuda_problem
from .fastrank import applicable
from .rank import (AUTO_DENSE_MAX_PARAMS, BLOCK_MAX_PARAMS, DENSE_FALLBACK_MAX_PARAMS, METHODS,
                   STRUCTURED_MAX_PARAMS, default_max_params, measurement_bytes)
from .verdict import measure_and_check
from .report.tables import format_share
from .studies.census import census_rows, format_census

PROG = "idlib"
DEFAULT_ATTEMPTS = 8
DEFAULT_SPREAD_FROM = 4

EPILOG = """\
exit codes: 0 success; 1 verify disagrees with the closed form or the rank is not certified;
2 bad input; 3 the environment (out of memory, an output that cannot be written; a reader
that closed the pipe early, silently); 130 interrupted. Every failure is one line 'idlib: ...'
on stderr.

--config FILE holds either AttentionConfig fields ({"d_model": 16, "n_heads": 4, ...}) or a
Hugging Face config.json (a regular file or a pipe, at most 1 MiB, read once). Flags override
what the file says; sizes the file leaves to AttentionConfig's defaults (n_kv_heads = heads,
head_dim = d_model / heads, value_dim = head_dim) are derived after the flags are applied, so
'--heads 16' re-derives them; sizes the Hugging Face reader fills in from the family's
defaults (idlib.hf) count as given (change them with --kv-heads / --head-dim).

JSON output (--json): one object with total, identified, unidentified (integers), share
(unidentified / total, a float), components (name -> total / identified / unidentified) and
config (the resolved AttentionConfig fields). verify adds seed, numerical {identified,
unidentified, rank, n_params, n_rows, gap, log10_gap, certified, method, seed, attempts} and
agrees; method is the route that measured: dense, structured or block (idlib.rank).
gap is sigma_r / max(sigma_(r+1), tau) at the rank cut, tau = sigma_1 max(rows, P) eps the
round-off tolerance (a lower bound on it for the structured route; for the block route, which
measures at a point of its own where J is block-triangular, the smallest diagonal block's
certified ratio, and the rank is certified only when it is the closed form's); it is null when
infinite (a zero Jacobian), and log10_gap is then null too. A rank is certified when gap >= 1e4.
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


def integer(text: str) -> int:
    """An argparse type: a decimal integer (its value is checked where it is used)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {show(text)}") from None


def number(text: str) -> float:
    """An argparse type: a decimal number."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {show(text)}") from None


BOOL = dict(action=argparse.BooleanOptionalAction, default=None)
# (group, AttentionConfig field, flag, argparse keywords): the one definition of every layer flag
LAYER_FLAGS: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("layer", "d_model", "--d-model", dict(type=integer, metavar="D", help="model width d")),
    ("layer", "n_heads", "--heads", dict(type=integer, metavar="H", help="query heads (default 1)")),
    ("layer", "n_kv_heads", "--kv-heads", dict(
        type=integer, metavar="G", help="key/value heads, dividing H (default H; 1 = multi-query)")),
    ("layer", "head_dim", "--head-dim", dict(
        type=integer, metavar="K", help="query/key width per head (default d / H)")),
    ("layer", "value_dim", "--value-dim", dict(
        type=integer, metavar="V", help="value width per head (default K)")),
    ("layer", "rope_fraction", "--rope-fraction", dict(
        type=number, metavar="F", help="share of each query/key head rotated by RoPE, F*K even "
                                       "(default 0)")),
    ("layer", "rope_base", "--rope-base", dict(
        type=number, metavar="B", help="RoPE base, theta_i = B^(-2i/r) (default 10000)")),
    ("layer", "bias", "--bias", dict(
        metavar="LETTERS", help="biases on a subset of q, k, v, o, e.g. qkv ('' or none: no biases)")),
    ("layer", "causal", "--causal", dict(BOOL, help="causal mask (--no-causal overrides a file)")),
    ("variants", "qk_norm", "--qk-norm", dict(
        choices=QK_NORMS,
        help="RMS-normalise each head's queries and keys; gain: with learned gains shared by the "
             "heads; whole: all heads together, gains per dim (OLMo 2); layernorm: a LayerNorm "
             "per head with its own gains (StableLM, Cohere); layernorm_shared: one LayerNorm "
             "with gain and shift for all heads (Phi, Persimmon) (default none)")),
    ("variants", "kv_latent", "--kv-latent", dict(
        type=integer, metavar="C", help="keys and values from a shared C-dim latent "
                                        "(multi-head latent attention)")),
    ("variants", "latent_norm", "--latent-norm", dict(
        BOOL, help="RMS-normalise the latent (needs --kv-latent)")),
    ("variants", "input_centered", "--input-centered", dict(
        BOOL, help="inputs with zero mean over features (LayerNorm'd)")),
    ("variants", "n_layers", "--layers", dict(
        type=integer, metavar="L", help="a stack of L residual layers x + attn(x) (default 1)")),
    ("variants", "kv_share", "--kv-share", dict(
        type=integer, metavar="S", help="each run of S consecutive layers shares its K/V "
                                        "projections (default 1)")),
    ("variants", "softcap", "--softcap", dict(
        type=number, metavar="C", help="logit soft-capping, scores -> C tanh(scores / C) "
                                       "(Gemma 2; default none)")),
    ("variants", "alibi", "--alibi", dict(
        BOOL, help="ALiBi: fixed per-head linear position biases on the scores (BLOOM, MPT)")),
    ("variants", "sinks", "--sinks", dict(
        BOOL, help="attention sinks: a learned logit per head in the softmax (gpt-oss)")),
    ("variants", "output_gate", "--output-gate", dict(
        BOOL, help="gated attention: each head's output times a sigmoid gate of the input "
                   "(Qwen3-Next)")),
)
FLAG_OF = {name: flag for _, name, flag, _ in LAYER_FLAGS}
GROUP_TITLES = {"layer": "the attention layer (flags override --config)",
                "variants": "variants (chapters 7, 9, 10)"}

# (flag, argparse keywords; dest is the flag's name): the options of verify only
VERIFY_FLAGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--implementation", dict(choices=("idlib", "transformers"), default="idlib",
                              help="measure idlib's own layer (default) or, with --config, the "
                                   "family's transformers module at a small layer of the same "
                                   "structure (chapter 9)")),
    ("--seed", dict(type=integer, default=0, metavar="S",
                    help=f"seed of the random parameters and inputs, 0..{MAX_SEED} (default 0)")),
    ("--attempts", dict(type=integer, default=DEFAULT_ATTEMPTS, metavar="N",
                        help="if the rank is not certified, measure again at seeds S+1, S+2, ... "
                             f"(at most N measurements in all; default {DEFAULT_ATTEMPTS})")),
    ("--spread-from", dict(type=integer, default=DEFAULT_SPREAD_FROM, metavar="I",
                           help="from the I-th retry on (0 = the first measurement) double the "
                                "query/key weights of the random point, which conditions layers "
                                f"of many tiny heads far better (default {DEFAULT_SPREAD_FROM})")),
    ("--max-params", dict(type=integer, default=None, metavar="N",
                          help="refuse to measure layers with more parameters (default "
                               f"{BLOCK_MAX_PARAMS} where the block route applies, "
                               f"{STRUCTURED_MAX_PARAMS} where the structured rank engine does, "
                               f"else {DENSE_FALLBACK_MAX_PARAMS}: a ~1.25 N x N dense Jacobian); "
                               "layers whose measurement would not fit in memory are refused anyway")),
    ("--method", dict(choices=METHODS, default="auto",
                      help="the route that measures the rank (idlib.rank): auto (default: dense up "
                           f"to {AUTO_DENSE_MAX_PARAMS} parameters, then block where it applies, "
                           "then structured), dense, structured or block")),
    ("--device", dict(default="cpu", metavar="DEVICE",
                      help="where the measurement runs, in float64: cpu (default) or cuda "
                           "(cuda:1, ...: a GPU)")),
)


def _add_config_options(p: argparse.ArgumentParser) -> None:
    groups = {key: p.add_argument_group(title) for key, title in GROUP_TITLES.items()}
    groups["layer"].add_argument("--config", metavar="FILE",
                                 help="JSON file: AttentionConfig fields or a Hugging Face config.json")
    groups["layer"].add_argument("--family", metavar="NAME",
                                 help="the family of a Hugging Face config whose model_type idlib "
                                      "does not know, e.g. llama (never guessed; see idlib.hf)")
    for group, name, flag, kw in LAYER_FLAGS:
        groups[group].add_argument(flag, dest=name, **kw)
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
    for flag, kw in VERIFY_FLAGS:
        p_verify.add_argument(flag, **kw)
    p_census = sub.add_parser("census", help="the census of published models (chapter 8)")
    p_census.add_argument("--json", action="store_true", help="print one JSON list of rows")
    return parser


# -- building the config -------------------------------------------------------------------

def file_layer(path: str, family: str | None = None) -> dict[str, Any] | Model:
    """What a config file says (the file is read once): the AttentionConfig fields it sets
    explicitly, or, for a Hugging Face config, the whole model by layer type (``idlib.model``).

    ``family`` names the family of a Hugging Face config whose model_type is unknown.
    """
    data, name = read_json(path)
    if not is_hf(data, family):
        return check_fields(data, name)
    try:
        return model_from_data(data, name, family)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"config file {name!r}: not a readable Hugging Face config "
                          f"({type(e).__name__}: {e})") from None


Layer = AttentionConfig | LatentAttentionConfig


def model_from_args(args: argparse.Namespace) -> tuple[Model | None, list[Layer]]:
    """(the model a Hugging Face --config describes, or None; the layers to count: one per counted
    layer type, the flags applied to each).  Raises ConfigError / UsageError on bad input."""
    if args.family is not None and args.config is None:
        raise UsageError("--family names the family of a --config file; give --config FILE")
    read = {} if args.config is None else file_layer(args.config, args.family)
    given = {name: getattr(args, name) for name in FLAG_OF if getattr(args, name) is not None}
    if isinstance(given.get("bias"), str) and given["bias"].strip().lower() in ("none", "-"):
        given["bias"] = ""
    if not isinstance(read, Model):
        values = dict(read, **given)
        if "d_model" not in values:
            raise UsageError("the model width is required: give --d-model D or --config FILE")
        return None, [AttentionConfig(**values)]
    layers = []
    for t in read.counted:
        if isinstance(t.config, LatentAttentionConfig):
            if given:
                raise UsageError(f"{FLAG_OF[next(iter(given))]} cannot change a multi-head latent "
                                 "attention layer (its fields are not AttentionConfig's); edit the "
                                 "config file")
            layers.append(t.config)
        else:
            layers.append(AttentionConfig(**(t.config.explicit() | given)))
    if not layers:
        raise ConfigError(f"{read.name}: no layer is softmax attention ({read.types[0].reason})")
    types = tuple(LayerType(t.layers, c) for t, c in zip(read.counted, layers)) + \
        tuple(t for t in read.types if t.config is None)
    return Model(read.name, read.family, read.n_layers, types, read.layers_given, read.ignored), layers


def config_from_args(args: argparse.Namespace) -> AttentionConfig | LatentAttentionConfig:
    """The one layer the arguments describe (a model whose layers differ is refused here)."""
    model, layers = model_from_args(args)
    if len(layers) > 1:
        raise UsageError(f"{model.name}: its layers differ ({len(layers)} types); count the whole "
                         "model with `idlib count --config`")
    return layers[0]


DEVICE_TEXT = re.compile(r"(cpu|cuda)(:(0|[1-9][0-9]*))?")   # what torch.device reads of these


def device_text(device: str | torch.device) -> str:
    """--device checked as text, without torch: cpu or cuda, with an optional index."""
    text = device if isinstance(device, str) else str(device)
    if not DEVICE_TEXT.fullmatch(text):
        raise UsageError(f"--device={show(text)} must be cpu or cuda (cuda:0, cuda:1, ...)")
    return text


def measurement_device(text: str) -> torch.device:
    """--device as a torch.device: cpu, or cuda[:i] when that GPU exists (UsageError otherwise).
    Only this asks torch (whether the GPU is there): the text is checked first without it."""
    device = torch.device(device_text(text))
    problem = None if device.type == "cpu" else cuda_problem(device)
    if problem is not None:
        raise UsageError(f"--device={show(text)}: {problem}")
    return device


def device_memory(device: torch.device) -> int:
    """Bytes free on ``device``: host memory for the CPU, the GPU's free memory for cuda."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return available_memory()


def check_verify_args(args: argparse.Namespace, config: AttentionConfig) -> None:
    """Refuse verify options out of range, and layers too large to measure (UsageError)."""
    if args.attempts < 1:
        raise UsageError(f"--attempts={show(args.attempts)} must be at least 1")
    if args.spread_from < 0:
        raise UsageError(f"--spread-from={show(args.spread_from)} must be at least 0")
    if not 0 <= args.seed <= MAX_SEED - args.attempts + 1:
        raise UsageError(f"--seed={show(args.seed)} must be in 0..{MAX_SEED} (with --attempts="
                         f"{show(args.attempts)}: at most {MAX_SEED - args.attempts + 1})")
    rule = {"block": blockrank.applicable, "structured": applicable}.get(args.method,
                                                                         lambda c: None)(config)
    if rule is not None:
        raise UsageError(f"--method {args.method} does not apply to this layer: {rule}")
    if args.max_params is None:
        args.max_params = default_max_params(config, args.method)
    if args.max_params < 1:
        raise UsageError(f"--max-params={show(args.max_params)} must be at least 1")
    text = device_text(args.device)
    P = n_params(config)
    if P > args.max_params:
        raise UsageError(f"the layer has {P} parameters, more than --max-params={args.max_params} "
                         "(raise --max-params to insist)")
    need = measurement_bytes(config, method=args.method)
    if text.startswith("cpu"):                  # refused without torch; a GPU's memory asks torch
        _check_memory(P, need, available_memory(), "available")
    device = measurement_device(text) if isinstance(args.device, str) else args.device
    if device.type == "cuda":
        _check_memory(P, need, device_memory(device), f"free on {device}")
    args.device = device


def _check_memory(P: int, need: int, have: int, where: str) -> None:
    if need > have:
        raise UsageError(f"measuring the layer's {P} parameters needs about {need / 1e9:.3g} GB "
                         f"(Jacobian and SVD), more than the {have / 1e9:.3g} GB {where}")


# -- output --------------------------------------------------------------------------------

def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def count_report(config: AttentionConfig) -> dict[str, Any]:
    out = count(config).to_dict()
    out["config"] = config.to_dict()
    return out


def verify_report(config: AttentionConfig, seed: int, attempts: int = 1,
                  spread_from: int | None = None, device: torch.device | None = None,
                  method: str = "auto") -> dict[str, Any]:
    out = count_report(config)
    verdict = measure_and_check(config, seed, attempts, spread_from, method=method,
                                **({} if device is None else {"device": device}))
    m, tries = verdict.measurement, verdict.attempts
    gap = _finite_or_none(m.gap)
    out["seed"] = seed
    out["numerical"] = {"identified": m.rank, "unidentified": m.unidentified, "rank": m.rank,
                        "n_params": m.n_params, "n_rows": m.n_rows, "gap": gap,
                        "log10_gap": None if gap is None else (math.log10(gap) if gap > 0 else None),
                        "certified": bool(m.certified), "method": m.method, "seed": tries[-1]["seed"],
                        "attempts": [dict(t, gap=_finite_or_none(t["gap"])) for t in tries]}
    out["agrees"] = verdict.agrees
    return out


def model_report(model: Model) -> dict[str, Any]:
    """The count of a model whose layers differ: the model's totals at the top (total, identified,
    unidentified, share over its counted layers) and each layer type's count in ``layer_types``."""
    mc = count_model(model)
    counts = dict(mc.counts)
    out = {k: v for k, v in mc.to_dict().items() if k != "layer_types"}
    out["layer_types"] = [
        {"layers": list(t.layers), "label": t.label,
         **({"not_counted": t.reason} if t.config is None else
            {**counts[t].to_dict(), "config": t.config.to_dict()})}
        for t in model.types]
    return out


def model_line(m: dict[str, Any]) -> str:
    """'model: 32 layers x 41,943,040 = 1,342,177,280 parameters, 4,227,072 unidentified (0.31%)'."""
    counted = m["counted_layers"]
    layers = f"{counted} of {m['n_layers']} layers" if counted != m["n_layers"] else \
        f"{m['n_layers']} layers"
    given = "" if m["n_layers_given"] else " (num_hidden_layers not in the file: one assumed)"
    ignored = (f"\nignored (not read by the family's transformers code): "
               f"{', '.join(m['ignored_fields'])}" if m.get("ignored_fields") else "")
    return (f"model: {layers}{given}, {m['total']:,} parameters, {m['unidentified']:,} unidentified "
            f"(share {format_share(m['unidentified'], m['total'])}){ignored}")


def format_model(report: dict[str, Any]) -> str:
    """Each layer type (its layer, its count table) and the model's totals."""
    parts = []
    for t in report["layer_types"]:
        if "not_counted" in t:
            parts.append(f"{t['label']}: not counted ({t['not_counted']})")
            continue
        config = AttentionConfig(**t["config"]) if "nope_dim" not in t["config"] else \
            LatentAttentionConfig(**t["config"])
        parts.append(f"{t['label']}: {_config_line(config)}\n{format_count(t)}")
    parts.append(model_line(report))
    return "\n\n".join(parts)


def _config_line(config: AttentionConfig | LatentAttentionConfig) -> str:
    d = config.to_dict()
    return type(config).__name__ + "(" + ", ".join(f"{k}={v!r}" for k, v in d.items()) + ")"


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
    lines.append(f"unidentified share {report['share']:.6f} (= {frac})")
    return "\n".join(lines)


def _scale_note(attempt: dict[str, Any]) -> str:
    return "" if attempt["qk_scale"] == 1.0 else f", query/key weights x{attempt['qk_scale']:g}"


def format_verify(report: dict[str, Any]) -> str:
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


def _implementation_report(label: str, c: Any) -> dict[str, Any]:
    return {"family": c.label, "layers": label, "config": c.config.to_dict(), "total": c.total,
            "identified": c.identified, "unidentified": c.unidentified,
            "numerical": {"rank": c.rank, "n_params": c.n_params, "gap": _finite_or_none(c.gap),
                          "certified": c.certified, "unidentified": c.measured_unidentified},
            "agrees": c.agrees}


def verify_implementation(args: argparse.Namespace) -> int:
    """verify --implementation transformers: the family's own attention module (idlib.implementations)
    at a small layer with the file's structure, closed form against its measured rank, one per
    counted layer type of the file."""
    if args.config is None:
        raise UsageError("--implementation transformers needs --config FILE (a Hugging Face config)")
    data, name = read_json(args.config)
    checks = implementations.check_model_of(data, name, args.family, args.seed)
    reports = [_implementation_report(t.label, c) for t, c in checks]
    agrees = all(c.agrees for _, c in checks)
    if args.json:
        print(json.dumps(reports[0] if len(reports) == 1 else
                         {"layer_types": reports, "agrees": agrees}, allow_nan=False))
    else:
        print("\n\n".join(
            f"{name}: family {c.label}, its transformers module at the small layer\n"
            + f"{_config_line(c.config)}\n"
            f"{'':<12} {'closed form':>12} {'measured':>12}\n"
            f"{'identified':<12} {c.identified:>12} {c.rank:>12}\n"
            f"{'unidentified':<12} {c.unidentified:>12} {c.measured_unidentified:>12}\n"
            f"gap {format_gap(c.gap)}, {'certified' if c.certified else 'NOT certified'}\n"
            f"verdict: {'AGREES' if c.agrees else 'DISAGREES'}" for t, c in checks))
    return 0 if agrees else 1


# -- entry point ---------------------------------------------------------------------------

def _fail(message: str, code: int = 2) -> int:
    print(f"{PROG}: error: {' '.join(str(message).split())}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    """Run a parsed command; bad input raises UsageError / ConfigError (exit 2 in ``main``)."""
    if args.command is None:
        raise UsageError("a command is required: count, verify or census (see --help)")
    if args.command == "census":
        rows = census_rows()
        print(json.dumps(rows, allow_nan=False) if args.json else format_census(rows))
        return 0
    if args.command == "verify" and args.implementation == "transformers":
        return verify_implementation(args)          # reads --config itself (once)
    model, layers = model_from_args(args)
    if args.command == "count":
        if model is not None and len(layers) > 1:
            report = model_report(model)
            print(json.dumps(report, allow_nan=False) if args.json else format_model(report))
            return 0
        report = count_report(layers[0])
        if model is not None:
            report["model"] = count_model(model).to_dict()
        print(json.dumps(report, allow_nan=False) if args.json else
              _config_line(layers[0]) + "\n" + format_count(report)
              + ("" if model is None else "\n" + model_line(report["model"])))
        return 0
    for config in layers:
        count(config)                 # a layer whose count is not derived: refused before measuring
        if isinstance(config, LatentAttentionConfig):
            raise UsageError("multi-head latent attention is measured on its transformers module: "
                             "add --implementation transformers")
        check_verify_args(args, config)
    reports = [verify_report(c, args.seed, args.attempts, args.spread_from, args.device, args.method)
               for c in layers]
    if len(reports) == 1:
        print(json.dumps(reports[0], allow_nan=False) if args.json else
              _config_line(layers[0]) + "\n" + format_verify(reports[0]))
    else:
        labels = [t.label for t in model.counted]
        combined = {"layer_types": [dict(r, layers=list(t.layers)) for r, t in
                                    zip(reports, model.counted)],
                    "agrees": all(r["agrees"] for r in reports)}
        print(json.dumps(combined, allow_nan=False) if args.json else "\n\n".join(
            f"{label}\n{_config_line(c)}\n{format_verify(r)}"
            for label, c, r in zip(labels, layers, reports)))
    return 0 if all(r["agrees"] for r in reports) else 1


EXIT_OK, EXIT_DISAGREES, EXIT_BAD_INPUT, EXIT_ENVIRONMENT, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def main(argv: Sequence[str] | None = None) -> int:
    """The command line.  Exit codes: 0 counted / agrees; 1 verify disagrees or its rank is not
    certified; 2 bad input; 3 the environment (memory, output that cannot be written); 130
    interrupted (Ctrl-C).  Every failure is one line on stderr, never a traceback."""
    scratch = _private_inductor_cache()
    try:
        code = run(build_parser().parse_args(argv))
        sys.stdout.flush()                          # an unwritable output fails here, not at exit
        return code
    except (UsageError, ConfigError) as e:
        return _fail(str(e))
    except (OverflowError, RecursionError) as e:
        return _fail(f"input too large to process ({type(e).__name__}: {e})")
    except MemoryError:
        return _fail("out of memory (try a smaller layer)", EXIT_ENVIRONMENT)
    except RuntimeError as e:                       # torch's allocator: "can't allocate memory"
        if "alloc" not in str(e).lower():
            raise
        return _fail(f"out of memory (try a smaller layer): {str(e).splitlines()[0]}",
                     EXIT_ENVIRONMENT)
    except BrokenPipeError:                         # `idlib census | head`: the reader left
        _silence_stdout()
        return EXIT_ENVIRONMENT
    except OSError as e:                            # a full disk, ...
        _silence_stdout()
        return _fail(f"cannot write the output ({e.strerror or e})", EXIT_ENVIRONMENT)
    except KeyboardInterrupt:
        _silence_stdout()
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush of what could not be
    written raises nothing more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):                   # no real stdout (a test's capture)
        pass


def _private_inductor_cache() -> str:
    """A temporary folder for torch's compiler cache, removed at the end of the command: torch
    creates its cache folder as soon as torch.func is used, and would leave an empty
    torchinductor_<user> in the temporary folder after every verify."""
    path = tempfile.mkdtemp(prefix="idlib-")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(path, "inductor"))
    return path
