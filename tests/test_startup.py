"""A command line that answers at once (issue 31): what does not measure does not import torch.

``import torch`` costs about 1.5 s of CPU time; idlib takes torch from idlib.lazy, which imports
it on first use.  Each command below runs in a fresh interpreter as ``python -m idlib ...`` would,
and says at exit whether torch was imported: not for count, census, --help and every refusal of
bad input; for a measurement (verify), yes.  Then the time: the count
of the issue's layer within 0.5 s of CPU time of a bare interpreter's start, both measured here,
side by side (CPU time, not wall time: another job on the machine stretches the wall clock).
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from idlib import lazy

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
COUNT = ["count", "--d-model", "4096", "--heads", "32", "--kv-heads", "8", "--rope-fraction", "1"]


# Runs idlib's __main__ as `python -m idlib` does and, at exit, says which modules were imported
# (-X importtime would not do: it does not see an import made through importlib, as idlib.lazy's).
PROBE = """\
import atexit, json, runpy, sys
def report():
    names = ("torch", "idlib.cli", "idlib.counting")
    sys.stderr.write("\\nprobe: " + json.dumps({n: n in sys.modules for n in names}) + "\\n")
atexit.register(report)
runpy.run_module("idlib", run_name="__main__", alter_sys=True)
"""


def imported_modules(*args: str) -> tuple[int, dict[str, bool], str]:
    """(exit code, {module: imported?} for torch, idlib.cli and idlib.counting, the rest of
    stderr) of the command ``python -m idlib *args``, run in a fresh interpreter."""
    run = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    rest, _, probe = run.stderr.rpartition("\nprobe: ")
    return run.returncode, json.loads(probe), rest.strip()


ANSWERS = [
    (COUNT, 0, "count"),
    (["count", "--d-model", "64", "--heads", "8", "--bias", "qkvo", "--qk-norm", "gain",
      "--rope-fraction", "0.5", "--json"], 0, "count"),
    (["count", "--config", str(DATA / "deepseek_v3_qlora.json")], 0, "count"),
    (["count", "--config", str(DATA / "gpt2.json"), "--kv-heads", "4"], 0, "count"),
    (["census"], 0, "census"),
    (["census", "--json"], 0, "census"),
    (["--help"], 0, "help"),
    (["count", "--help"], 0, "help"),
    (["verify", "--help"], 0, "help"),
]
REFUSALS = [
    (["count", "--heads", "3", "--d-model", "8"], "d_model=8 must be divisible by n_heads=3"),
    ([], "a command is required"),
    (["count", "--d-model", "8", "--rope-fraction", "0.3"], "must be an even integer"),
    (["count", "--config", str(DATA / "malformed.json")], "not valid JSON"),
    (["count", "--config", str(DATA / "no_positions.json")], "is not a family the reader knows"),
    (["count", "--d-model", "8", "--seed", "1"], "unrecognized arguments"),
    (["verify", "--d-model", "8", "--heads", "2", "--attempts", "0"], "--attempts=0"),
    (["verify", "--d-model", "8", "--heads", "2", "--device", "gpu"], "must be cpu or cuda"),
    (["verify", "--d-model", "8", "--heads", "2", "--max-params", "3"], "more than --max-params=3"),
    (["verify", "--d-model", "100000", "--max-params", str(10 ** 12)], "GB available"),
    (["verify", "--d-model", "8", "--heads", "2", "--alibi", "--method", "structured"],
     "does not apply to this layer"),
    (["verify", "--implementation", "transformers", "--d-model", "8"], "needs --config FILE"),
]


@pytest.mark.parametrize("args,code,kind", ANSWERS, ids=[" ".join(a[:3]) for a, _, _ in ANSWERS])
def test_counts_census_and_help_do_not_import_torch(args, code, kind):
    rc, modules, rest = imported_modules(*args)
    assert rc == code, rest
    assert modules["idlib.cli"] and modules["idlib.counting"]              # the probe sees them
    assert not modules["torch"]


@pytest.mark.parametrize("args,message", REFUSALS, ids=[" ".join(a[:5]) for a, _ in REFUSALS])
def test_refusals_do_not_import_torch(args, message):
    rc, modules, rest = imported_modules(*args)
    assert rc == 2 and message in rest and rest.startswith("idlib: error: ")
    assert not modules["torch"]


def test_a_measurement_imports_torch():
    """The control: verify measures, with torch (so the probe can see torch)."""
    rc, modules, rest = imported_modules("verify", "--d-model", "4", "--heads", "2")
    assert rc == 0, rest
    assert modules["torch"]


def test_importing_every_idlib_module_imports_no_torch():
    """No module uses torch while it is imported (idlib.lazy): not only the CLI's."""
    code = ("import importlib, pkgutil, sys, idlib\n"
            "names = [m.name for m in pkgutil.walk_packages(idlib.__path__, 'idlib.')]\n"
            "for name in names: importlib.import_module(name)\n"
            "print(len(names), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert int(out[0]) > 50 and out[1] == "False"


def _cpu_and_wall(argv: list[str]) -> tuple[float, float]:
    """CPU time (user + system) and wall time of one run of ``argv`` as a child process."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, timeout=120)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def test_count_answers_within_half_a_second_of_a_bare_interpreter():
    """Issue 31's target: min over 5 runs each, side by side (bare, count, bare, count, ...)."""
    bare, count = [], []
    for _ in range(5):
        bare.append(_cpu_and_wall([sys.executable, "-c", "pass"]))
        count.append(_cpu_and_wall([sys.executable, "-m", "idlib", *COUNT]))
    cpu = min(c for c, _ in count) - min(c for c, _ in bare)
    wall = min(w for _, w in count) - min(w for _, w in bare)
    assert cpu <= 0.5, f"count takes {cpu:.2f} s of CPU time more than a bare interpreter " \
                       f"(wall {wall:.2f} s more)"


# -- the stand-in itself ----------------------------------------------------------------------------

def test_the_lazy_module_imports_on_first_use_and_keeps_what_it_read():
    stand_in = lazy.LazyModule("json")
    assert "not imported yet" in repr(stand_in) or "json" in sys.modules
    dumps = stand_in.dumps
    assert dumps is sys.modules["json"].dumps and "dumps" in vars(stand_in)
    assert stand_in.dumps([1]) == "[1]" and "(imported)" in repr(stand_in)
    with pytest.raises(AttributeError):
        stand_in.__wrapped__                   # what inspect and copy ask: not the module's
    with pytest.raises(AttributeError, match="on the module itself"):
        stand_in.dumps = None
    with pytest.raises(AttributeError):
        stand_in.no_such_function


def test_is_tensor_asks_without_importing():
    import torch
    assert lazy.is_tensor(torch.zeros(2)) and not lazy.is_tensor([0.0, 1.0])
    assert not lazy.is_tensor(None) and lazy.imported("torch") and not lazy.imported("no_such_module")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", "import sys, idlib.lazy as l; "
                          "print(l.is_tensor([1.0]), l.imported('torch'), 'torch' in sys.modules)"],
                         capture_output=True, text=True, env=env, timeout=60, check=True).stdout
    assert out.split() == ["False", "False", "False"]
