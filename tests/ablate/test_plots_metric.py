"""The sweep's plots show what its report leads with: the scatter and forest plots compare the
sweep's ``metric`` (``test/acc`` for a sweep scored on a test set, not the best validation
epoch), and the validation curves skip the epochs a legacy metrics.csv filled with the last
validation's values (drawn as measurements, they made a saw-tooth of one seed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.paths import REPO

from visattn.ablate import plots
from visattn.ablate.results import read_results
from visattn.files import atomic_write_text, read_metric_curve

CIFAR = REPO / "benchmarks" / "results" / "cifar10_cpu"


def test_validated_drops_repeats_of_the_last_validation_only() -> None:
    acc = {1: 0.61, 2: 0.61, 3: 0.62, 4: 0.62, 5: 0.70}
    loss = {1: 1.41, 2: 1.41, 3: 1.36, 4: 1.35, 5: 1.1}  # epoch 4 validated: another loss
    assert plots._validated(acc, loss) == {1: 0.61, 3: 0.62, 4: 0.62, 5: 0.70}
    assert plots._validated({0: 0.5, 1: 0.5}, {}) == {0: 0.5, 1: 0.5}  # no loss: no judgement


@pytest.mark.parametrize("metric", ["val/acc", "test/acc"])
def test_scatter_and_forest_plots_use_the_sweeps_metric(metric, tmp_path, monkeypatch) -> None:
    if not (CIFAR / "results.csv").is_file():
        pytest.skip("the committed cifar10_cpu sweep is not in this checkout")
    compared, labelled = [], []
    real_compare, real_finish = plots.compare, plots._finish_accuracy_plot
    monkeypatch.setattr(
        plots, "compare", lambda s, b, m: compared.append(m) or real_compare(s, b, m)
    )
    monkeypatch.setattr(
        plots,
        "_finish_accuracy_plot",
        lambda fig, ax, path, m: labelled.append((path.name, m)) or real_finish(fig, ax, path, m),
    )
    rows = read_results(CIFAR / "results.csv")
    for r in rows:  # the runs' metrics.csv relative to the copy
        r["metrics_csv"] = str(CIFAR / r["metrics_csv"]) if r.get("metrics_csv") else ""
    paths = plots.write_plots(rows, tmp_path, baseline="resnet20_none", metric=metric)
    assert all(p.stat().st_size > 0 for p in paths)
    assert compared == [metric]
    assert dict(labelled) == {
        "acc_vs_params.png": metric,
        "acc_vs_macs.png": metric,
        "acc_vs_latency.png": metric,
        "val_curves.png": "val/acc",
    }


def test_curves_of_a_legacy_metrics_csv_keep_the_epochs_that_validated(tmp_path: Path) -> None:
    csv = tmp_path / "metrics.csv"
    atomic_write_text(
        csv,
        "epoch,step,val/loss,val/acc\n"
        "0,10,,\n1,20,1.4,0.61\n2,30,1.4,0.61\n3,40,1.3,0.65\n4,50,1.3,0.65\n",
    )
    got = plots._validated(read_metric_curve(csv), read_metric_curve(csv, "val/loss"))
    assert got == {1: 0.61, 3: 0.65}
