"""The machine and software a run happened on (recorded next to every timing this repo writes)."""
from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit() -> str:
    """HEAD's short hash, with '+changes' when the tree has uncommitted edits ('unknown' if no git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def environment() -> dict:
    import torch

    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average": load,
        "git_commit": git_commit(),
        "date": utc_now(),
        "executable": sys.executable,
    }


def run_verify(args: list[str]) -> tuple[dict, float, "os.struct_rusage"]:
    """``python -m idlib verify ARGS --json`` in its own process: its JSON report, wall seconds
    and the child's own resource usage (``os.wait4``: peak RSS, CPU time). Exit 0 (agrees) and
    1 (disagrees) are reports; any other exit raises with the end of its stderr."""
    import json
    import tempfile
    import time

    cmd = [sys.executable, "-m", "idlib", "verify", *args, "--json"]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status)
        proc.returncode = code
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if code not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)} failed ({code}): {stderr.strip()[-2000:]}")
    report = json.loads(stdout)
    report["exit_code"] = code
    return report, seconds, usage
