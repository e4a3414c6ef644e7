"""Copy a finished sweep's report and plots into the docs, for the ablations guide's example.

    python docs/make_report_example.py runs/ablations/se_quick

copies ``report.md`` and every ``*.png`` beside it from the sweep folder (what
``python -m visattn.ablate SWEEP --out DIR`` writes) into ``docs/assets/report_example/`` (or
``docs/assets/NAME/`` with ``--name NAME``),
replacing what was there; ``docs/guides/ablations.md`` includes that copy of the report
(``pymdownx.snippets``), so its plot links (``![name](name.png)``) are rewritten to be relative
to the guide, and its title becomes a sub-heading. The sweep must have finished its report:
a folder without ``report.md``, or whose report links a plot that is not there, is refused
before anything is replaced.
"""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

ASSETS = Path(__file__).resolve().parent / "assets"
OUT = ASSETS / "report_example"


def from_guide(name: str) -> str:
    """The folder ``docs/assets/<name>`` as seen from the guide that includes its report
    (docs/guides/ablations.md)."""
    return f"../assets/{name}"


GUIDE_TO_OUT = from_guide(OUT.name)
_PLOT_LINK = re.compile(r"!\[[^\]]*\]\(([^)\s]+\.png)\)")


def copy_report(sweep_dir: str | Path, out: Path = OUT, link_to: str = GUIDE_TO_OUT) -> list[Path]:
    """Replace ``out``'s contents with ``sweep_dir``'s ``report.md`` and PNG plots.

    Raises:
        FileNotFoundError: no ``report.md`` in ``sweep_dir``, or a plot it links is missing.
    """
    src = Path(sweep_dir)
    report = src / "report.md"
    if not report.is_file():
        raise FileNotFoundError(
            f"{report} does not exist: pass the --out folder of a finished sweep "
            "(python -m visattn.ablate SWEEP --out DIR writes DIR/report.md)"
        )
    text = report.read_text()
    missing = [name for name in _PLOT_LINK.findall(text) if not (src / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{report} links plots that are not in {src}: {missing}; rebuild them with "
            f"python -m visattn.ablate SWEEP --out {src} --report-only"
        )
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    copied = [out / "report.md"]
    # included in docs/guides/ablations.md: links relative to the guide, headings below its own
    text = _PLOT_LINK.sub(lambda m: m[0].replace(m[1], f"{link_to}/{m[1]}"), text)
    copied[0].write_text(re.sub(r"^(#+) ", r"\1## ", text, flags=re.M))
    for png in sorted(src.glob("*.png")):
        shutil.copy2(png, out / png.name)
        copied.append(out / png.name)
    return copied


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep_dir", help="a finished sweep's output folder (its --out)")
    ap.add_argument(
        "--name",
        default=OUT.name,
        help=f"the copy's folder under docs/assets (default {OUT.name}; the guide includes "
        "report_example and report_imagenette112)",
    )
    args = ap.parse_args(argv)
    if not args.name or "/" in args.name or args.name.startswith("."):
        ap.error(f"--name must be one folder name under docs/assets, got {args.name!r}")
    for path in copy_report(args.sweep_dir, ASSETS / args.name, from_guide(args.name)):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
