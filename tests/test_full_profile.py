"""The committed record of the full profile: its verdict lines are the notebook's own."""
import importlib.util
import json
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("full_profile", ROOT / "benchmarks" / "full_profile.py")
full_profile = importlib.util.module_from_spec(spec)
spec.loader.exec_module(full_profile)


def test_verdict_lines_keep_checks_and_drop_noise(tmp_path):
    out = lambda text: nbformat.v4.new_output("stream", name="stdout", text=text)  # noqa: E731
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x", outputs=[
        out("8 of 8 configurations: measured rank = closed form;\nP = 144\n"),
        out(" 50%|#####     | 2/4 [00:16<00:16]\nTrue\nAttentionConfig(d_model=8, causal=False, bias='')\n"),
        out("agrees: True\n8 of 8 configurations: measured rank = closed form;\n")])])
    path = tmp_path / "ch.ipynb"
    nbformat.write(nb, path)
    assert full_profile.verdict_lines(path) == [
        "8 of 8 configurations: measured rank = closed form;", "agrees: True"]


def test_the_committed_record_is_complete():
    rec = json.loads((ROOT / "benchmarks" / "results" / "full_profile.json").read_text())
    chapters = {Path(c["notebook"]).name for c in rec["chapters"]}
    assert rec["profile"] == "full" and all(c["status"] == "ok" for c in rec["chapters"])
    assert {"01_single_head.ipynb", "06_training.ipynb", "appendix_sweep.ipynb"} <= chapters
    md = (ROOT / "benchmarks" / "results" / "full_profile.md").read_text()
    assert md == full_profile.markdown(rec)
