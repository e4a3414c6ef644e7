"""The core package never imports the optional integrations' libraries: ultralytics is
AGPL-3.0, and segmentation-models-pytorch is an extra."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import json, sys
import visattn, visattn.models, visattn.blocks, visattn.integrations
import visattn.integrations.yolo, visattn.integrations.smp
print(json.dumps(sorted(k for k in sys.modules if k.split(".")[0] in
      ("ultralytics", "segmentation_models_pytorch"))))
"""


def test_importing_visattn_and_its_integrations_loads_neither_ultralytics_nor_smp() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_register_without_ultralytics_names_the_extra(monkeypatch) -> None:
    import builtins

    from visattn.integrations import yolo

    real_import = builtins.__import__

    def no_ultralytics(name, *args, **kwargs):
        if name.split(".")[0] == "ultralytics":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ultralytics)
    with pytest.raises(ImportError, match=r"pip install visattn\[yolo\]"):
        yolo.register()
