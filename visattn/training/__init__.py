"""Training: the LightningModule, the LightningCLI of ``train_cls.py`` and its callbacks."""

from .._extras import missing_extra

try:
    from .callbacks import EpochMetricsCSV, RunSummary, read_metrics_csv
    from .cli import VisattnCLI, cli_main, run
    from .module import ClassificationModule, NonFiniteLossError, lr_factor
except ImportError as _err:
    raise missing_extra(_err, "train", "visattn.training") from _err

__all__ = [
    "ClassificationModule",
    "EpochMetricsCSV",
    "NonFiniteLossError",
    "RunSummary",
    "VisattnCLI",
    "cli_main",
    "lr_factor",
    "read_metrics_csv",
    "run",
]
