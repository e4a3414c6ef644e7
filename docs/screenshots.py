"""Look at the built site as a reader would: build it, then render the home page, the block
gallery, one block page and the placement and ablation guides in headless Chromium and save the
screenshots under ``docs/screenshots/`` (checked by eye: pictures visible, equations rendered,
tables readable).

The equations are MathML written at build time (``docs/mathml.py``), so the pages need no
network and no script to show them.

    python docs/screenshots.py [--block cbam] [--chromium chromium]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "screenshots"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--block", default="cbam")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
            cwd=ROOT,
            env=env,
            check=True,
        )
        pages = {
            "home": (site / "index.html", 1000),
            "gallery": (site / "blocks" / "index.html", 1400),
            f"block_{args.block}": (site / "blocks" / f"{args.block}.html", 2200),
            "guide_placement": (site / "guides" / "placement.html", 1800),
            "guide_ablations": (site / "guides" / "ablations.html", 3000),
        }
        for name, (page, height) in pages.items():
            png = OUT / f"{name}.png"
            subprocess.run(
                [
                    args.chromium,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--allow-file-access-from-files",
                    "--virtual-time-budget=15000",  # the theme's scripts and lazy images settle
                    f"--window-size=1280,{height}",
                    f"--screenshot={png}",
                    page.as_uri(),
                ],
                check=True,
                capture_output=True,
                timeout=300,
            )
            print(png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
