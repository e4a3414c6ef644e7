"""The documentation site builds strictly (a broken link or a missing API page fails) and has a
generated page per registered block."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html import escape as html_escape
from pathlib import Path

import pytest
from helpers.paths import REPO

import visattn
from visattn.constants import POSITIONS

pytestmark = pytest.mark.xdist_group("docs_site")  # the site is built once, on one worker

pytest.importorskip("mkdocs")
pytest.importorskip("mkdocs_gen_files")
pytest.importorskip("mkdocstrings")
pytest.importorskip("latex2mathml")  # docs/mathml.py, the build's hook


@pytest.fixture(scope="session")  # once per worker, even when other modules' tests interleave
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return out


def test_site_builds_strictly_with_a_page_per_block(site: Path):
    for name in visattn.list_blocks():
        page = site / "blocks" / f"{name}.html"
        assert page.is_file(), f"no gallery page for block {name!r}"
        html = page.read_text()
        assert html_escape(visattn.block_info(name).paper.split(",")[0]) in html
    gallery = (site / "blocks" / "index.html").read_text()
    assert all(f'href="{n}.html"' in gallery for n in visattn.list_blocks())


def test_block_pages_show_their_pictures_and_typeset_equations(site: Path):
    assets = REPO / "docs" / "assets" / "attention"
    for name in visattn.list_blocks():
        html = (site / "blocks" / f"{name}.html").read_text()
        if (assets / f"{name}.png").is_file():  # a committed picture is shown and shipped
            assert f'src="../assets/attention/{name}.png"' in html, name
            assert (site / "assets" / "attention" / f"{name}.png").is_file()
        else:
            assert f"make_pictures.py --blocks {name}" in html, name
    se = (site / "blocks" / "se.html").read_text()
    assert '<div class="arithmatex"><math alttext="z_c = \\frac{1}{HW}' in se  # MathML, built
    assert "<mfrac>" in se and "mathjax" not in se.lower()  # no script, no network


def test_every_equation_of_the_site_is_mathml(site: Path):
    pages = {p: p.read_text() for p in site.rglob("*.html")}
    with_math = [p for p, html in pages.items() if 'class="arithmatex"><math ' in html]
    assert len(with_math) >= 11, with_math  # at least the main blocks' pages
    tex_left = re.compile(r'class="arithmatex">\\[\[(]')  # TeX a script would have typeset
    assert not [p for p, html in pages.items() if tex_left.search(html)]


def test_no_list_runs_into_the_paragraph_before_it(site: Path):
    # Python-Markdown needs a blank line before a list (GitHub does not): without it the
    # items are printed inside the paragraph, as "- item" text
    run_in = re.compile(r"<p>(?:(?!</p>).)*\n(?:[-*]|\d+\.) ", re.S)
    found = {str(p.relative_to(site)) for p in site.rglob("*.html") if run_in.search(p.read_text())}
    assert not found, found


def test_gallery_shows_every_picture_and_says_which_are_missing(site: Path):
    gallery = (site / "blocks" / "index.html").read_text()
    assets = REPO / "docs" / "assets" / "attention"
    for name in visattn.list_blocks():
        if (assets / f"{name}.png").is_file():
            assert f'src="../assets/attention/{name}.png"' in gallery, name
        else:
            assert f"make_pictures.py --blocks {name}" in gallery, name


def test_guides_show_the_placement_diagram_and_the_example_report(site: Path):
    placement = (site / "guides" / "placement.html").read_text()
    assert "assets/placement.svg" in placement
    svg = (site / "assets" / "placement.svg").read_text()
    assert all(f">{p}</text>" in svg for p in POSITIONS)
    ablations = (site / "guides" / "ablations.html").read_text()
    example = REPO / "docs" / "assets" / "report_example"
    plots = sorted(example.glob("*.png"))
    assert plots, "no example report: run docs/make_report_example.py on a finished sweep"
    for png in plots:
        assert f"assets/report_example/{png.name}" in ablations, png.name
        assert (site / "assets" / "report_example" / png.name).is_file()
    assert "Δ test/acc paired" in ablations  # the report's table, included


def test_site_has_the_api_reference_and_benchmarks(site: Path):
    reference = (site / "reference" / "models.html").read_text()
    assert "create_model" in reference and "inject" in reference
    assert (site / "results" / "index.html").is_file()
    assert (site / "benchmarks.html").is_file()


def test_site_reads_from_disk(site: Path):
    """Opened from ``file://``, a link lands on a page (no ``dir/`` link that a browser shows
    as a folder listing) and search has its index as a script (no fetch from a server)."""
    folder_links = []
    for page in site.rglob("*.html"):
        for href in re.findall(r'href="([^"#?]*)"', page.read_text()):
            internal = href and "://" not in href and not href.startswith(("mailto:", "data:"))
            if internal and href.endswith("/"):
                folder_links.append((str(page.relative_to(site)), href))
    assert not folder_links, folder_links[:10]
    assert (site / "search" / "search_index.js").read_text().startswith("var __index = ")
