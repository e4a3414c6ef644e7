"""Every count of the zoo that the README and the docs state (blocks, named models, released
tags) is the registry's count now: a block or a model added without updating the text fails
here, so the text cannot drift."""

from __future__ import annotations

import re

import pytest
from helpers.paths import REPO

import visattn
from visattn.models.pretrained import list_pretrained

#: how the text states each count, and what it must equal
STATED = {
    r"any of (\d+) blocks": lambda: len(visattn.list_blocks()),
    r"\*\*(\d+) blocks\*\*": lambda: len(visattn.list_blocks()),
    r"\*\*(\d+) named models\*\*": lambda: len(visattn.list_models()),
    r"\b(\d+) tags\b": lambda: len(list_pretrained()),
}


def _texts() -> dict[str, str]:
    files = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return {str(f.relative_to(REPO)): f.read_text() for f in files if "assets" not in f.parts}


@pytest.mark.parametrize("pattern", list(STATED))
def test_stated_counts_are_the_registries(pattern: str) -> None:
    expected = STATED[pattern]()
    found = [
        (path, int(m.group(1)))
        for path, text in _texts().items()
        for m in re.finditer(pattern, text)
    ]
    assert found, f"no text states {pattern!r} any more: drop it from STATED"
    wrong = [(path, n) for path, n in found if n != expected]
    assert not wrong, f"{pattern!r} should be {expected}: {wrong}"
