"""A MkDocs hook: the TeX of every page becomes MathML when the site is built, so equations
render with no script and no network (browsers draw MathML Core natively).

``pymdownx.arithmatex`` (generic mode) protects the TeX from Markdown and wraps it,
HTML-escaped, in ``<div class="arithmatex">\\[ ... \\]</div>`` (display) or
``<span class="arithmatex">\\( ... \\)</span>`` (inline), on the pages and in the docstrings
that mkdocstrings renders. This hook replaces each wrapper's content with the MathML that
``latex2mathml`` converts it to, keeping the TeX as the formula's ``alttext``; a display
formula of several equations set apart by ``, \\qquad`` becomes one formula per equation, which
the stylesheet stacks. A formula that does not convert (an exception, an ``<merror>``, or an
unknown command left as text) is logged as a warning naming the page and the TeX, which fails
``mkdocs build --strict``.
"""

from __future__ import annotations

import html
import logging
import re
from typing import TYPE_CHECKING

from latex2mathml.converter import convert

if TYPE_CHECKING:
    from mkdocs.structure.pages import Page

log = logging.getLogger("mkdocs.hooks.mathml")

#: an arithmatex wrapper: its tag, its delimiters and the (escaped) TeX between them
_WRAPPED = re.compile(
    r'<(?P<tag>div|span) class="arithmatex">'
    r"(?:\\\[(?P<display>.*?)\\\]|\\\((?P<inline>.*?)\\\))"
    r"</(?P=tag)>",
    re.S,
)


def split_display(tex: str) -> list[str]:
    """A display formula's parts: the docstrings set equations side by side, a comma and a
    ``\\quad`` or ``\\qquad`` between them; split there (outside braces and ``\\left ...
    \\right``), each part is its own formula, and they stand one below the other instead of
    running off a narrow page. A space with no comma before it (``x \\quad (\\text{Eq. 1})``)
    stays inside its equation."""
    parts, depth, start = [], 0, 0
    for m in re.finditer(r"[{}]|\\left\b|\\right\b|,\s*\\q?quad\b", tex):
        token = m[0]
        if token in ("{", r"\left"):
            depth += 1
        elif token in ("}", r"\right"):
            depth -= 1
        elif depth == 0:
            parts.append(tex[start : m.start() + 1])  # the comma ends the equation before
            start = m.end()
    parts.append(tex[start:])
    return [p.strip() for p in parts if p.strip()]


#: ``F'`` as latex2mathml writes it, a prime set as a superscript: the prime glyph is already
#: raised, so browsers draw it twice raised and small; written after its base instead
_SUPERSCRIPT_PRIME = re.compile(r"<msup>(<mi>[^<]*</mi>)<mi>(&#x0203[234];)</mi></msup>")


def tex_to_mathml(tex: str, *, display: bool) -> str:
    """The MathML of one formula; ``ValueError`` when it does not convert."""
    try:
        mathml = convert(tex, display="block" if display else "inline")
    except Exception as err:  # latex2mathml raises its own types, and IndexError on bad input
        raise ValueError(f"{type(err).__name__}: {err}") from err
    if "<merror" in mathml:
        raise ValueError(f"latex2mathml marked an error: {mathml}")
    unknown = re.findall(r">([^<]*\\[A-Za-z]+)<", mathml)  # a command it passed through as text
    if unknown:
        raise ValueError(f"TeX commands latex2mathml does not know: {unknown}")
    mathml = _SUPERSCRIPT_PRIME.sub(r"<mrow>\1<mo>\2</mo></mrow>", mathml)
    alt = html.escape(" ".join(tex.split()), quote=True)
    return mathml.replace("<math ", f'<math alttext="{alt}" ', 1)


def on_page_content(html_text: str, page: Page, **kwargs: object) -> str:
    """Every arithmatex formula of the page as MathML (MkDocs calls this after Markdown)."""

    def replace(match: re.Match) -> str:
        display = match["display"] is not None
        tex = html.unescape(match["display"] if display else match["inline"]).strip()
        try:
            parts = split_display(tex) if display else [tex]
            mathml = "".join(tex_to_mathml(part, display=display) for part in parts)
        except ValueError as err:
            log.warning(
                "%s: the equation %r does not convert to MathML (%s)", page.file.src_uri, tex, err
            )
            return match[0]
        return f'<{match["tag"]} class="arithmatex">{mathml}</{match["tag"]}>'

    return _WRAPPED.sub(replace, html_text)
