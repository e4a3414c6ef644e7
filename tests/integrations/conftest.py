"""Shared set-up of the integration tests: Ultralytics works offline and writes its settings
into a temporary folder (set before any test module imports ultralytics), never into $HOME."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

_CONFIG_DIR = tempfile.mkdtemp(prefix="visattn-yolo-settings-")
atexit.register(shutil.rmtree, _CONFIG_DIR, ignore_errors=True)
os.environ.setdefault("YOLO_CONFIG_DIR", _CONFIG_DIR)
os.environ["YOLO_OFFLINE"] = "1"  # no connectivity checks, no downloads
os.environ["YOLO_AUTOINSTALL"] = "false"  # no pip installs of missing requirements
os.environ.setdefault("YOLO_VERBOSE", "false")
