"""The data errors a user can act on: a data set that is not where the run looks for it, and
one whose files differ from the official ones. ``train_cls.py`` prints either in one line."""

from __future__ import annotations


class DatasetNotFoundError(FileNotFoundError):
    """A data set's files or folders are not where the options point; the message names the
    path looked at and how to fix it (``--data.root``, ``--data.download true``)."""


class DatasetIntegrityError(RuntimeError):
    """A dataset file differs from the official one: its checksum, or what it holds (a truncated
    or garbled file, labels outside the classes)."""


class DatasetLayoutError(ValueError):
    """A data set's folders or files are laid out in a way the loader cannot use: splits whose
    class folders differ, an empty class folder, a class folder that links back to its split,
    a CIFAR batch that is not a dict of ``(N, 3072)`` images. The message names the files at
    fault and the fix."""
