"""The docs' generated pieces agree with the code: the placement diagram draws exactly
``POSITIONS``, the main blocks' docstrings carry their paper equations in TeX, and
``docs/make_report_example.py`` copies a finished sweep's report with links that resolve from
the guide, refusing an unfinished one."""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType

import pytest
from helpers.paths import REPO

import visattn
from visattn.constants import BLOCK_POSITIONS, POSITIONS

#: the blocks whose paper equations the gallery must render (issue: at least these)
MAIN_BLOCKS = (
    "se", "eca", "cbam", "gsop", "nonlocal", "bam", "coord", "simam", "gc", "sk",
    "residual_attention",
)  # fmt: skip


def _script(name: str) -> ModuleType:
    """A script of ``docs/`` imported as a module (``docs`` is not a package)."""
    spec = importlib.util.spec_from_file_location(f"docs_{name}", REPO / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _texts(svg: str) -> list[str]:
    root = ET.fromstring(svg)
    return [el.text or "" for el in root.iter("{http://www.w3.org/2000/svg}text")]


def test_placement_diagram_names_every_position_and_no_other() -> None:
    texts = _texts(_script("placement_diagram").placement_svg())
    slots = {t for t in texts if t in POSITIONS}
    assert slots == set(POSITIONS)
    # every slot appears once per block kind, with its module attribute beside it
    for p in BLOCK_POSITIONS:
        assert texts.count(p) == 2, p
        assert texts.count(f"attn_{p}") == 2, p
    words = {w for t in texts for w in re.findall(r"\b[a-z]+\b", t)}
    assert not {"pre_act", "after", "before"} & words  # no position that does not exist


def test_placement_diagram_refuses_a_layout_out_of_step_with_the_constants(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    diagram = _script("placement_diagram")
    basic = [s for s in diagram.LAYOUTS["BasicBlock"] if s != "post"]
    monkeypatch.setitem(diagram.LAYOUTS, "BasicBlock", basic)
    with pytest.raises(ValueError, match=r"BasicBlock's slots .* BLOCK_POSITIONS"):
        diagram.placement_svg()


@pytest.mark.parametrize("name", MAIN_BLOCKS)
def test_main_blocks_state_their_paper_equations_in_tex(name: str) -> None:
    doc = inspect.getdoc(visattn.block_info(name).cls) or ""
    blocks = re.findall(r"^\$\$\n(.+?)\n\$\$$", doc, re.M | re.S)
    assert blocks, f"{name}: no $$ display equation in its docstring"
    for tex in blocks:
        assert tex.count("{") == tex.count("}"), f"{name}: unbalanced braces in {tex!r}"
        assert tex.count(r"\big(") == tex.count(r"\big)"), f"{name}: unbalanced \\big in {tex!r}"
        assert "``" not in tex and "$" not in tex, f"{name}: text markup inside TeX: {tex!r}"


def _display_equations(name: str) -> list[str]:
    doc = inspect.getdoc(visattn.block_info(name).cls) or ""
    return re.findall(r"^\$\$\n(.+?)\n\$\$$", doc, re.M | re.S)


@pytest.mark.parametrize("name", [n for n in visattn.list_blocks() if _display_equations(n)])
def test_block_equations_convert_to_mathml(name: str) -> None:
    pytest.importorskip("latex2mathml")
    mathml = _script("mathml")
    for tex in _display_equations(name):
        for part in mathml.split_display(tex):
            out = mathml.tex_to_mathml(part, display=True)
            assert out.startswith("<math alttext=") and 'display="block"' in out, (name, part)
            assert "\\" not in out.split(">", 1)[1], (name, part)  # no TeX command left over


def test_display_equations_split_after_a_comma_and_a_top_level_quad_only() -> None:
    pytest.importorskip("latex2mathml")
    split = _script("mathml").split_display
    tex = r"a = b, \qquad c = \left( d, \qquad e \right), \quad f = {g, \qquad h}"
    assert split(tex) == ["a = b,", r"c = \left( d, \qquad e \right),", r"f = {g, \qquad h}"]
    assert split(r"x = 1 \quad (\text{Eq. 1})") == [r"x = 1 \quad (\text{Eq. 1})"]  # no comma
    assert split(r"x, \qquadx") == [r"x, \qquadx"]  # another command, not \qquad


def test_a_formula_that_does_not_convert_is_refused() -> None:
    pytest.importorskip("latex2mathml")
    to_mathml = _script("mathml").tex_to_mathml
    with pytest.raises(ValueError, match=r"Error"):
        to_mathml(r"\frac{1}{", display=True)  # latex2mathml's own exception, wrapped
    with pytest.raises(ValueError, match=r"does not know: \['\\\\sigmoid'\]"):
        to_mathml(r"\sigmoid(x)", display=True)  # passed through as text: refused


def test_a_prime_is_written_after_its_base_not_as_a_superscript() -> None:
    pytest.importorskip("latex2mathml")
    out = _script("mathml").tex_to_mathml("F'' = F'", display=False)
    assert "<msup>" not in out and "<mo>&#x02033;</mo>" in out and "<mo>&#x02032;</mo>" in out


def _sweep_folder(root: Path, plots: list[str]) -> Path:
    root.mkdir()
    links = "\n".join(f"![{p}]({p}.png)" for p in plots)
    (root / "report.md").write_text(f"# Sweep `x`\n\n| a |\n|---|\n| 1 |\n\n## Plots\n\n{links}\n")
    for p in plots:
        (root / f"{p}.png").write_bytes(b"\x89PNG fake " + p.encode())
    return root


def test_report_example_copies_the_report_with_links_from_the_guide(tmp_path: Path) -> None:
    script = _script("make_report_example")
    sweep = _sweep_folder(tmp_path / "sweep", ["paired_diff", "val_curves"])
    out = tmp_path / "example"
    out.mkdir()
    (out / "stale.png").write_bytes(b"old")  # from an earlier example: replaced
    copied = script.copy_report(sweep, out)
    assert sorted(p.name for p in copied) == ["paired_diff.png", "report.md", "val_curves.png"]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in copied)
    text = (out / "report.md").read_text()
    assert text.startswith("### Sweep `x`") and "\n#### Plots" in text  # below the guide's h2
    guide = REPO / "docs" / "guides"
    for link in re.findall(r"\]\(([^)]+\.png)\)", text):  # resolve from the guide's folder
        assert (guide / link).resolve() == (REPO / "docs/assets/report_example" / Path(link).name)
    assert (out / "val_curves.png").read_bytes() == (sweep / "val_curves.png").read_bytes()


def test_report_example_refuses_an_unfinished_sweep_and_keeps_the_old_example(
    tmp_path: Path,
) -> None:
    script = _script("make_report_example")
    out = tmp_path / "example"
    out.mkdir()
    (out / "report.md").write_text("old")
    with pytest.raises(FileNotFoundError, match=r"report\.md does not exist"):
        script.copy_report(tmp_path, out)
    sweep = _sweep_folder(tmp_path / "sweep", ["paired_diff"])
    (sweep / "paired_diff.png").unlink()
    with pytest.raises(FileNotFoundError, match=r"links plots that are not in .*paired_diff"):
        script.copy_report(sweep, out)
    assert (out / "report.md").read_text() == "old"


def test_report_example_under_another_name_links_to_its_own_folder(tmp_path: Path) -> None:
    script = _script("make_report_example")
    sweep = _sweep_folder(tmp_path / "sweep", ["paired_diff"])
    out = tmp_path / "report_other"
    script.copy_report(sweep, out, "../assets/report_other")
    links = re.findall(r"\]\(([^)]+\.png)\)", (out / "report.md").read_text())
    assert links == ["../assets/report_other/paired_diff.png"]
    with pytest.raises(SystemExit):
        script.main([str(sweep), "--name", "../elsewhere"])
