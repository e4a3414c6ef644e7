"""Training: the LightningModule, the LightningCLI of ``train_cls.py``, its callbacks, and
loading a finished run (``load_run``)."""

from .._extras import missing_extra

try:
    from .callbacks import EpochMetricsCSV, RunSummary
    from .cli import VisattnCLI, cli_main, run
    from .load import LoadedRun, load_run
    from .module import ClassificationModule, NonFiniteLossError, lr_factor
except ImportError as _err:
    raise missing_extra(_err, "train", "visattn.training") from _err

__all__ = [
    "ClassificationModule",
    "EpochMetricsCSV",
    "LoadedRun",
    "NonFiniteLossError",
    "RunSummary",
    "VisattnCLI",
    "cli_main",
    "load_run",
    "lr_factor",
    "run",
]
