"""The tables of chapter 6 and of the appendix sweep: captioned, labelled, formatted from the
data they are given (shares at round-off printed as such)."""
from types import SimpleNamespace

from idlib import AttentionConfig, count
from idlib.rank import measure
from idlib.report import sweep as sweep_tables
from idlib.report import training as training_tables
from idlib.studies.training import mean_std


def history(overlap, grad, drift, loss):
    return SimpleNamespace(overlap={"total": overlap}, grad_overlap=grad,
                           drift={"total": drift}, final_loss=loss)


def test_optimizer_table_prints_round_off_as_such():
    runs = {"teacher-student": {"sgd": history([1e-15, 2e-16], [3e-16], [0.5, 0.25], 3.0),
                                "adam": history([0.1, 0.3, 0.2], [1e-14], [1.0, 2.0], 2.5)}}
    table = training_tables.optimizers(runs, 7)
    assert ":name: tab-train-optimizers" in table and "One run of 7 steps" in table
    assert "| teacher-student | sgd | < 1e-12 | < 1e-12 | < 1e-12 | 2.500e-01 | 3.000e+00 |" in table
    assert "| teacher-student | adam | 2.000e-01 | 3.000e-01 | < 1e-12 | 2.000e+00 | 2.500e+00 |" \
        in table
    assert training_tables.median([3.0, 1.0, 2.0, 4.0]) == 2.0


def test_rebalancing_table_gives_mean_spread_and_extremes():
    hs = [history([], [], [1.0], 1.0), history([], [], [3.0], 3.0)]
    table = training_tables.rebalancing({("recall", "adam", "balance"): hs}, 2, 9, mean_std)
    assert ":name: tab-train-rebalance" in table and "2 seeds of 9 steps" in table
    assert "| recall | adam | balancing | 2.000e+00 ± 1.414e+00 | 1.000e+00 | 3.000e+00 | " \
           "2.000e+00 |" in table


def test_sweep_tables_share_the_row_number_and_fold():
    c = AttentionConfig(4, n_heads=2, rope_fraction=1.0, bias="qk")
    row = dict(config=c, total=66, identified=40, rank=40, gap=1e9, agrees=True,
               certified=True, attempts=[{}, {}])
    html = sweep_tables.all_configurations([row])
    assert html.startswith("<details>") and html.endswith("</details>")
    assert ":name: tab-sweep-configs" in html and ":name: tab-sweep-results" in html
    assert "| 0 | 4 | 2 | 2 | 2 | 2 | 2 | 10000 | qk | no |" in html
    assert "| 0 | 66 | 40 | 40 | > 1e8 | 2 | yes |" in html
    assert sweep_tables.verdict(dict(row, agrees=False)) == "DISAGREES"
    assert sweep_tables.verdict(dict(row, agrees=False, certified=False)) == "NOT cert."


def test_fragile_table_flags_a_certified_disagreement():
    layer = AttentionConfig(d_model=1, n_heads=2, head_dim=1)
    m = measure(layer, seed=0)
    table = sweep_tables.fragile([(0, m, m)], layer, count(layer))
    assert ":name: tab-sweep-fragile" in table and "$d = 1$ with $H = 2$" in table
    wrong = SimpleNamespace(rank=m.rank - 1, gap=1e9, certified=True)
    assert "DISAGREES" in sweep_tables.fragile([(0, wrong, m)], layer, count(layer))
