"""Ablation sweeps: many runs of train_cls.py, one results table, one report, plots.

``python -m visattn.ablate SWEEP.yaml --out DIR`` or :func:`run_sweep`. The sweep file format is
in :mod:`visattn.ablate.sweep`, the results.csv columns in :mod:`visattn.ablate.results`, the
report in :mod:`visattn.ablate.report`, one run (settings, completion marker, resume rules,
train-and-mark) in :mod:`visattn.ablate.job`, the sweep's course and its execution options in
:mod:`visattn.ablate.runner`, parallel and Ray execution in :mod:`visattn.ablate.executors`, the
folder and run locks in :mod:`visattn.locks`, up-front validation and equal-budget widths
in :mod:`visattn.ablate.resolve`.
"""

from .job import evaluate_run
from .report import render_report, summarize, write_report
from .results import RESULT_COLUMNS, read_results, write_results
from .runner import ExecutionPlan, run_sweep
from .stats import mean_std, paired_ci, resolvable_difference, welch_ci
from .sweep import Run, Sweep, Variant, load_sweep, overrides_to_args

__all__ = [
    "RESULT_COLUMNS",
    "ExecutionPlan",
    "Run",
    "Sweep",
    "Variant",
    "evaluate_run",
    "load_sweep",
    "mean_std",
    "overrides_to_args",
    "paired_ci",
    "read_results",
    "render_report",
    "resolvable_difference",
    "run_sweep",
    "summarize",
    "welch_ci",
    "write_report",
    "write_results",
]
