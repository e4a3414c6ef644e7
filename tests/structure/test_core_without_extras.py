"""The core runs with none of the optional extras installed: in a fresh interpreter where every
package of ``visattn._extras.EXTRAS`` is missing, the blocks, the models, attention capture, the
generated datasets and the ImageFolder checks work, and what does need an extra says which.

A package is made missing with ``sys.modules[name] = None``, Python's documented way to make its
import fail: ``import`` raises ``ModuleNotFoundError`` and ``importlib.util.find_spec`` answers
``None``, as for a package that is not installed. (A meta-path finder cannot do both: a finder
that answers a spec makes ``find_spec`` report the package as installed, and one that raises
breaks torch's own ``find_spec`` probes at import.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers.paths import REPO

from visattn._extras import EXTRAS

#: every optional package, as imported
MISSING = sorted({name for names in EXTRAS.values() for name in names})

_PROBE = """
import json, os, sys
missing = json.loads(sys.argv[1])
for name in missing:
    sys.modules[name] = None

import torch
import visattn
import visattn.data
from visattn.data.cues import make_cues
from visattn.data.imagefolder import ImageFolderDataset, verify_images


def error(call):
    try:
        call()
    except ImportError as e:
        return str(e)
    return "no error"


model = visattn.create_model("se_resnet20_cifar", num_classes=10).eval()
with visattn.capture_attention(model) as maps:
    logits = model(torch.randn(2, 3, 32, 32))
block = visattn.create_block("cbam", 16)
image = os.path.join(sys.argv[2], "a", "x.png")
report = {
    "logits": list(logits.shape),
    "maps": len(maps),
    "block": list(block(torch.randn(1, 16, 8, 8)).shape),
    "shapes": len(visattn.data.make_shapes(4)[1]),
    "cues": len(make_cues(4)[1]),
    "fast_check": verify_images([image], "fast"),
    "full_check": error(lambda: verify_images([image], "full")),
    "read_image": error(lambda: ImageFolderDataset(sys.argv[2])[0]),
    "training": error(lambda: __import__("visattn.training")),
    "export": error(lambda: visattn.export_onnx(model, sys.argv[3])),
    "loaded": sorted(m for m in sys.modules if sys.modules[m] is not None
                     and m.split(".")[0] in missing),
}
print(json.dumps(report))
"""


def test_core_works_and_extras_are_named_without_any_optional_package(tmp_path) -> None:
    from PIL import Image

    (tmp_path / "images" / "a").mkdir(parents=True)
    Image.new("RGB", (8, 8), (10, 20, 30)).save(tmp_path / "images" / "a" / "x.png")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [json.dumps(MISSING), str(tmp_path / "images"), str(tmp_path / "m.onnx")]
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["loaded"] == []
    assert report["logits"] == [2, 10] and report["maps"] == 9
    assert report["block"] == [1, 16, 8, 8]
    assert report["shapes"] == 4 and report["cues"] == 4
    assert report["fast_check"] == {}
    for what in ("full_check", "read_image", "training"):
        assert "pip install visattn[train]" in report[what], (what, report[what])
    assert "pip install 'visattn[export]'" in report["export"], report["export"]
