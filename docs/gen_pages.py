"""Pages generated at build time (mkdocs-gen-files): the block gallery, from the registry; the
API reference, from the docstrings; the benchmark tables, from ``benchmarks/results``.

A newly registered block gets its gallery page with no hand edits. Its picture is the committed
asset ``docs/assets/attention/<name>.png``, made by ``python docs/make_pictures.py``; a block
without one says how to make it.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import mkdocs_gen_files
import torch

import visattn
from visattn.blocks import block_info, create_block, list_blocks
from visattn.blocks.registry import FAMILIES
from visattn.profile import count_macs, count_params

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "docs"), str(ROOT / "benchmarks")]
from make_leaderboard import block_evidence  # noqa: E402  (beside this script, not a package)
from placement_diagram import placement_svg  # noqa: E402  (beside this script, not a package)
from twins import TWINS, block_of, timm_type_of  # noqa: E402  (the benchmarks' table)

ASSETS = ROOT / "docs" / "assets" / "attention"
CHANNELS, SIZE = 256, 14


def _fmt(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


def _cost(name: str) -> tuple[int, int]:
    torch.manual_seed(0)
    blk = create_block(name, CHANNELS)
    return count_params(blk), count_macs(blk, (1, CHANNELS, SIZE, SIZE))


def _weights_shape(name: str) -> str:
    """Shape of the weights the block applies, captured on a small input."""
    torch.manual_seed(0)
    blk = create_block(name, 32).eval()
    with torch.no_grad(), visattn.capture_attention(blk) as maps:
        blk(torch.randn(2, 32, 8, 8))
    return ", ".join(f"`{tuple(m.shape)}`" for m in maps.values()) or "(none captured)"


def _twin(name: str) -> str:
    """How the block was checked against timm (the package's twins table) or its authors."""
    keys = [k for k in TWINS if block_of(k) == name]
    if not keys:
        return (
            "timm has no module of this block; the tests check it against the paper's "
            "equations re-computed independently and, where the authors released code, "
            "against a reference written from it with the weights copied (`tests/blocks`)."
        )
    lines = []
    for k in keys:
        t = TWINS[k]
        opts = f" with visattn options `{t.options}`" if t.options else ""
        note = f" ({t.note})" if t.note else ""
        lines.append(
            f"- timm's `{timm_type_of(k) or k}` module{opts}: outputs equal with the "
            f"weights copied{note}."
        )
    return "\n".join(lines)


#: a display equation in a docstring: ``$$`` on its own line, the TeX, ``$$`` on its own line
_DISPLAY_MATH = re.compile(r"^\$\$\n(.+?)\n\$\$$", re.M | re.S)


def equations(cls: type) -> list[str]:
    """The display equations (``$$ ... $$`` blocks, TeX) of a block's docstring, in order."""
    return _DISPLAY_MATH.findall(inspect.getdoc(cls) or "")


def _equations_section(name: str) -> list[str]:
    found = equations(block_info(name).cls)
    if not found:
        return [
            "The equations are written out in the docstring below (as text: this block's "
            "docstring has no TeX yet)."
        ]
    return [part for tex in found for part in ("$$", tex, "$$", "")] + [
        "From the block's docstring (below, with the paper's equation numbers, the shapes and "
        "the implementation's choices)."
    ]


def _make_picture(name: str) -> str:
    """The command that makes a block's missing picture."""
    return f"`python docs/make_pictures.py --blocks {name}`"


def _picture_section(name: str) -> list[str]:
    """A block page's picture and how it was made, or how to make it."""
    if not (ASSETS / f"{name}.png").exists():
        return [
            f"No picture yet: {_make_picture(name)} makes it (every block records a map, so "
            "every block can have one)."
        ]
    return [
        f"![{name}: captured attention maps](../assets/attention/{name}.png)",
        "",
        "Captured with `visattn.capture_attention` on a held-out `shapes` image (the dashed "
        "box is the target, which alone decides the label), from a ResNet-20 with this "
        "block at the last residual block of each stage, trained briefly from random "
        "weights on the embedded data. A spatial map is overlaid on the image, one panel "
        "per block; channel weights `(N, C, 1, 1)` have no spatial extent and are drawn as "
        "a heat strip per stage, one column per channel. The title gives the network's "
        "held-out accuracy (9 classes, chance 0.11): a few dozen steps, so the maps are "
        "early ones. Regenerate with "
        f"`nice -n 19 env OMP_NUM_THREADS=1 python docs/make_pictures.py --blocks {name} "
        "--force`.",
    ]


def block_page(name: str, params: int, macs: int) -> str:
    info = block_info(name)
    cls = info.cls
    lines = [
        f"# {name}",
        "",
        f"**{info.paper}** · family: {info.family}"
        + (" · replaces a residual branch's middle conv (`position: conv`)" * info.replaces_conv),
        "",
        *(
            [
                f"**float16 limit:** {info.fp16_limit}. Under float16 a non-finite result raises "
                "`FloatingPointError` naming the block; bfloat16 autocast and float32 are finite "
                "([transforms](../guides/transforms.md)).",
                "",
            ]
            if info.fp16_limit
            else []
        ),
        "```python",
        f'blk = visattn.create_block("{name}", 256)',
        "```",
        "",
        "## Equations",
        "",
        *_equations_section(name),
        "",
        "## What it attends to",
        "",
    ]
    lines += _picture_section(name)
    lines += [
        "",
        "## Cost",
        "",
        f"| params | MACs | at |\n|---|---|---|\n| {params:,} | {_fmt(macs)} | C={CHANNELS}, "
        f"{SIZE}x{SIZE} |",
        "",
        f"Weights it applies (C=32, 8x8, batch 2): {_weights_shape(name)}.",
        "",
        "## On the leaderboard",
        "",
        *block_evidence(name),
        "",
        "## Identity at insertion",
        "",
        info.identity_form,
        "",
        "## Checked against",
        "",
        _twin(name),
        "",
        "## Options",
        "",
        "| option | default |\n|---|---|",
        *[f"| `{k}` | `{v!r}` |" for k, v in info.defaults.items()],
        "",
        "## Paper, equations and parameter count",
        "",
        f"::: {cls.__module__}.{cls.__qualname__}",
        "    options:",
        "      show_root_heading: false",
        "      members: false",
        "",
    ]
    return "\n".join(lines)


def _picture_entry(name: str, params: int, macs: int) -> list[str]:
    """A block in the gallery: its heading, paper and cost, and its picture at the page's
    width (or, on the same line as the paper, how to make it)."""
    about = f"{block_info(name).paper} · {params:,} params, {_fmt(macs)} MACs"
    if not (ASSETS / f"{name}.png").exists():
        missing = f"{about} · no picture yet ({_make_picture(name)} makes it)"
        return [f"### [{name}]({name}.md)", "", missing, ""]
    picture = (
        f"![{name}: captured attention maps](../assets/attention/{name}.png){{ loading=lazy }}"
    )
    return [f"### [{name}]({name}.md)", "", about, "", f"[{picture}]({name}.md)", ""]


def gallery() -> None:
    rows, entries = [], {family: [] for family in FAMILIES}
    for name in list_blocks():
        info = block_info(name)
        params, macs = _cost(name)
        with mkdocs_gen_files.open(f"blocks/{name}.md", "w") as f:
            f.write(block_page(name, params, macs))
        shown = "yes" if (ASSETS / f"{name}.png").exists() else "not yet"
        rows.append(
            f"| [{name}]({name}.md) | {info.family} | {info.paper} | {params:,} "
            f"| {_fmt(macs)} | [{shown}](#{name}) |"
        )
        entries[info.family] += _picture_entry(name, params, macs)
    table = [
        f'??? abstract "The {len(rows)} blocks in one table"',
        "",
        "    | block | family | paper | params | MACs | picture |",
        "    |---|---|---|---|---|---|",
        *(f"    {row}" for row in rows),
        "",
    ]
    sections = [
        part
        for family, lines in entries.items()
        if lines
        for part in (f"## {family.capitalize()} attention", "", *lines)
    ]
    with mkdocs_gen_files.open("blocks/index.md", "w") as f:
        f.write(
            "---\nhide:\n  - toc\n---\n\n# Block gallery\n\n"
            f"{len(rows)} registered blocks, one page each, generated from the registry. "
            f"Parameters and multiply-accumulates at C={CHANNELS}, {SIZE}x{SIZE} "
            "(`torch.utils.flop_counter`). Each picture is what the block applied in a small "
            "network trained on the embedded `shapes` data (`docs/make_pictures.py`; each page "
            "says how it was made): spatial maps over the image, channel weights as heat "
            "strips.\n\n" + "\n".join(table + sections)
        )


REFERENCE = {
    "blocks": [
        "visattn.blocks.registry",
        "visattn.blocks.conventions",
        "visattn.blocks.timm_classes",
        "visattn.blocks.capture",
    ],
    "models": [
        "visattn.models.factory",
        "visattn.models.registry",
        "visattn.models.placement",
        "visattn.models.inject",
        "visattn.models.checkpoint",
        "visattn.models.pretrained",
    ],
    "training": [
        "visattn.training.module",
        "visattn.training.callbacks",
        "visattn.training.loggers",
        "visattn.training.load",
        "visattn.data.datamodule",
        "visattn.data.sources",
        "visattn.data.cues",
    ],
    "ablate": ["visattn.ablate.runner"],
    "deploy": [
        "visattn.export",
        "visattn.profile",
        "visattn.visualize",
        "visattn.visualize.maps",
        "visattn.visualize.localization",
        "visattn.visualize.figures",
    ],
}


def reference() -> None:
    index = ["# API reference", "", "Generated from the docstrings.", ""]
    for page, modules in REFERENCE.items():
        with mkdocs_gen_files.open(f"reference/{page}.md", "w") as f:
            f.write(f"# {page}\n\n" + "\n\n".join(f"::: {m}" for m in modules) + "\n")
        index.append(f"- [{page}]({page}.md): " + ", ".join(f"`{m}`" for m in modules))
    index += ["", "The top-level names:", ""]
    index += [f"- `visattn.{n}`" for n in visattn.__all__ if not n.startswith("_")]
    with mkdocs_gen_files.open("reference/index.md", "w") as f:
        f.write("\n".join(index) + "\n")


#: a line that starts a list item (``- ``, ``* ``, ``1. ``), at the margin
_LIST_ITEM = re.compile(r"^(?:[-*]|\d+\.) ")


def blank_line_before_lists(markdown: str) -> str:
    """GitHub starts a list right after a paragraph's last line; Python-Markdown needs a blank
    line first, or the items run into the paragraph. The results tables are written for GitHub:
    a blank line is put before each list that follows a paragraph (code blocks left alone)."""
    out, fenced = [], False
    for line in markdown.split("\n"):
        fenced ^= line.lstrip().startswith("```")
        prev = out[-1] if out else ""
        in_paragraph = prev.strip() and not prev.startswith((" ", "|"))
        if not fenced and _LIST_ITEM.match(line) and in_paragraph and not _LIST_ITEM.match(prev):
            out.append("")
        out.append(line)
    return "\n".join(out)


def benchmarks() -> None:
    """One page per results table, with the CSVs beside it so the tables' links resolve."""
    results = ROOT / "benchmarks" / "results"
    index = [
        "# Result tables",
        "",
        "Tables from `benchmarks/results/`, regenerated by the scripts in `benchmarks/`; each "
        "page says how it was measured, and the raw CSVs sit beside it.",
        "",
    ]
    for path in sorted(results.iterdir()):
        if path.suffix not in (".md", ".csv"):
            continue
        text = path.read_text()
        with mkdocs_gen_files.open(f"results/{path.name}", "w") as f:
            f.write(blank_line_before_lists(text) if path.suffix == ".md" else text)
        if path.suffix == ".md":
            first = next((ln for ln in path.read_text().splitlines() if ln.startswith("#")), "")
            index.append(f"- [{path.stem}]({path.name}): {first.lstrip('# ').strip()}")
    with mkdocs_gen_files.open("results/index.md", "w") as f:
        f.write("\n".join(index) + "\n")


def diagrams() -> None:
    with mkdocs_gen_files.open("assets/placement.svg", "w") as f:
        f.write(placement_svg())


gallery()
diagrams()
reference()
benchmarks()
