"""Look at the built site as a reader would: build it, then render the home page, the block
gallery and one block page in headless Chromium and save the screenshots under
``docs/screenshots/`` (checked by eye: pictures visible, tables readable).

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
            "home": site / "index.html",
            "gallery": site / "blocks" / "index.html",
            f"block_{args.block}": site / "blocks" / args.block / "index.html",
        }
        for name, page in pages.items():
            png = OUT / f"{name}.png"
            subprocess.run(
                [
                    args.chromium,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--hide-scrollbars",
                    "--window-size=1280,1400",
                    f"--screenshot={png}",
                    page.as_uri(),
                ],
                check=True,
                capture_output=True,
                timeout=120,
            )
            print(png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
