"""Look at the built site as a reader would: build it, then render the home page, the block
gallery, one block page and the placement and ablation guides in headless Chromium and save the
screenshots under ``docs/screenshots/`` (checked by eye: pictures visible, equations rendered,
tables readable).

The pages load MathJax from a CDN (``mkdocs.yml``); offline, give a local copy with
``--mathjax`` (e.g. ``npm install mathjax@3`` somewhere, then
``--mathjax .../node_modules/mathjax/es5/tex-mml-chtml.js``) and the built pages are pointed at
it before they are rendered. Without one, the equations show as TeX source.

    python docs/screenshots.py [--block cbam] [--chromium chromium] [--mathjax FILE]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "screenshots"


def _cdn_mathjax() -> str:
    """The MathJax URL ``mkdocs.yml`` loads (its ``extra_javascript`` entry on a CDN)."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    return next(js for js in config.get("extra_javascript", []) if "mathjax" in js.lower())


def _use_local_mathjax(site: Path, mathjax: Path) -> int:
    """Point every built page at ``mathjax`` instead of the CDN; returns the pages changed."""
    url, local, changed = _cdn_mathjax(), mathjax.resolve().as_uri(), 0
    for page in site.rglob("*.html"):
        text = page.read_text()
        if url in text:
            page.write_text(text.replace(url, local))
            changed += 1
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--block", default="cbam")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    ap.add_argument("--mathjax", type=Path, help="a local tex-mml-chtml.js (MathJax 3)")
    args = ap.parse_args(argv)
    if args.mathjax is not None and not args.mathjax.is_file():
        ap.error(f"--mathjax {args.mathjax}: no such file")
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
        if args.mathjax is not None:
            print(f"MathJax from {args.mathjax} in {_use_local_mathjax(site, args.mathjax)} pages")
        pages = {
            "home": (site / "index.html", 1400),
            "gallery": (site / "blocks" / "index.html", 1400),
            f"block_{args.block}": (site / "blocks" / args.block / "index.html", 2200),
            "guide_placement": (site / "guides" / "placement" / "index.html", 1800),
            "guide_ablations": (site / "guides" / "ablations" / "index.html", 3000),
        }
        for name, (page, height) in pages.items():
            png = OUT / f"{name}.png"
            subprocess.run(
                [
                    args.chromium,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--hide-scrollbars",
                    "--allow-file-access-from-files",
                    "--virtual-time-budget=15000",  # scripts (MathJax) run before the shot
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
