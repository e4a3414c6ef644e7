"""The placement guide's diagram: where each position of :data:`visattn.constants.POSITIONS`
puts a block in a BasicBlock and in a Bottleneck, as an SVG drawn from the constants.

The layer sequences below follow the two blocks' ``forward`` in :mod:`visattn.models.resnet`;
the slots between them come from :data:`visattn.constants.BLOCK_POSITIONS` (the order the
forward reaches them), so a position added to the constants without a place in the diagram
fails the docs build (:func:`placement_svg` raises) instead of being left out silently.
``docs/gen_pages.py`` writes the SVG into the site at build time; nothing is committed.
"""

from __future__ import annotations

from html import escape

from visattn.constants import BLOCK_POSITIONS, POSITIONS

#: each block's residual branch as ``(label, conv_replaceable)`` layers; a slot name in the list
#: marks where that slot sits on the main path (``identity`` is on the shortcut, ``stage`` after
#: the stage's last block)
LAYOUTS: dict[str, list[str | tuple[str, bool]]] = {
    "BasicBlock": [
        "pre",
        ("conv1 3x3, BN, ReLU", True),
        "inner",
        ("conv2 3x3", False),
        "prenorm",
        ("BN", False),
        "standard",
        "+",
        "post",
        ("ReLU", False),
        "output",
    ],
    "Bottleneck": [
        "pre",
        ("conv1 1x1, BN, ReLU", False),
        ("conv2 3x3", True),
        "prenorm",
        ("BN, ReLU", False),
        "inner",
        ("conv3 1x1, BN", False),
        "standard",
        "+",
        "post",
        ("ReLU", False),
        "output",
    ],
}

_ROW, _COL, _BOX_W, _TOP, _LEFT = 38, 400, 190, 40, 100
_SLOT_FILL, _LAYER_FILL, _CONV_STROKE = "#c5cae9", "#eeeeee", "#d81b60"


def _check(layout: list[str | tuple[str, bool]], block: str) -> None:
    slots = [s for s in layout if isinstance(s, str) and s != "+"]
    on_path = [p for p in BLOCK_POSITIONS if p != "identity"]
    # the order is the block's own (prenorm comes after inner in a BasicBlock, before it in a
    # Bottleneck); what must agree is the set of main-path slots
    if sorted(slots) != sorted(on_path) or len(slots) != len(on_path):
        raise ValueError(
            f"placement diagram: {block}'s slots {slots} are not BLOCK_POSITIONS' main-path "
            f"slots {on_path}; update docs/placement_diagram.py LAYOUTS"
        )
    drawn = {*slots, "identity", "stage", "conv"}
    if drawn != set(POSITIONS):
        raise ValueError(
            f"placement diagram: POSITIONS {sorted(POSITIONS)} but the diagram draws "
            f"{sorted(drawn)}; give the new position a place in docs/placement_diagram.py"
        )


def _text(x: float, y: float, s: str, size: int = 12, weight: str = "normal", **kw: str) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in kw.items())
    return (
        f'<text x="{x}" y="{y}" font-size="{size}" font-weight="{weight}" '
        f'text-anchor="middle" dominant-baseline="middle"{extra}>{escape(s)}</text>'
    )


def _column(block: str, x0: float) -> tuple[list[str], float]:
    layout = LAYOUTS[block]
    _check(layout, block)
    cx = x0 + _BOX_W / 2 + 10
    out = [_text(cx, _TOP - 22, block, 15, "bold"), _text(cx, _TOP, "x (block input)", 12)]
    y = _TOP + _ROW
    add_y = 0.0
    for item in layout:
        out.append(
            f'<line x1="{cx}" y1="{y - _ROW + 10}" x2="{cx}" y2="{y - 13}" stroke="#555" '
            'marker-end="url(#arrow)"/>'
        )
        if item == "+":
            add_y = y
            out.append(f'<circle cx="{cx}" cy="{y}" r="11" fill="white" stroke="#555"/>')
            out.append(_text(cx, y + 1, "+", 16, "bold"))
        elif isinstance(item, str):
            out.append(
                f'<rect x="{cx - 70}" y="{y - 12}" width="140" height="24" rx="12" '
                f'fill="{_SLOT_FILL}" stroke="#3949ab"/>'
            )
            out.append(_text(cx, y, item, 12, "bold", fill="#1a237e"))
            out.append(_text(cx + 120, y, f"attn_{item}", 10, fill="#555"))
        else:
            label, replaceable = item
            stroke = (
                f'stroke="{_CONV_STROKE}" stroke-width="2" stroke-dasharray="5,3"'
                if replaceable
                else 'stroke="#999"'
            )
            out.append(
                f'<rect x="{cx - _BOX_W / 2}" y="{y - 13}" width="{_BOX_W}" height="26" '
                f'fill="{_LAYER_FILL}" {stroke}/>'
            )
            out.append(_text(cx, y, label, 12))
            if replaceable:
                out.append(_text(cx + 135, y, "conv", 12, "bold", fill=_CONV_STROKE))
        y += _ROW
    # the shortcut: from the input down the left side to the addition, through ``identity``
    sx = cx - _BOX_W / 2 - 55
    mid = (_TOP + add_y) / 2
    out += [
        f'<polyline points="{cx - 62},{_TOP} {sx},{_TOP} {sx},{add_y} {cx - 13},{add_y}" '
        'fill="none" stroke="#555" marker-end="url(#arrow)"/>',
        f'<rect x="{sx - 40}" y="{mid - 12}" width="80" height="24" rx="12" '
        f'fill="{_SLOT_FILL}" stroke="#3949ab"/>',
        _text(sx, mid, "identity", 12, "bold", fill="#1a237e"),
        _text(sx, mid + 24, "attn_identity", 10, fill="#555"),
        _text(sx, mid - 24, "shortcut", 10, fill="#555"),
    ]
    # the stage slot, after the stage's last block
    out += [
        f'<line x1="{cx}" y1="{y - _ROW + 10}" x2="{cx}" y2="{y - 13}" stroke="#555" '
        'stroke-dasharray="2,3" marker-end="url(#arrow)"/>',
        _text(cx, y - 2, "... the stage's last block, then", 11, fill="#555"),
        f'<rect x="{cx - 70}" y="{y + 12}" width="140" height="24" rx="12" '
        f'fill="{_SLOT_FILL}" stroke="#3949ab"/>',
        _text(cx, y + 24, "stage", 12, "bold", fill="#1a237e"),
        _text(cx + 125, y + 24, "layerN.attn_stage", 10, fill="#555"),
    ]
    return out, y + 50


def placement_svg() -> str:
    """The diagram, BasicBlock left and Bottleneck right, as an SVG document."""
    parts: list[str] = []
    height = 0.0
    for k, block in enumerate(LAYOUTS):
        col, h = _column(block, _LEFT + k * _COL)
        parts += col
        height = max(height, h)
    legend_y = height + 6
    parts += [
        f'<rect x="20" y="{legend_y - 10}" width="40" height="20" rx="10" fill="{_SLOT_FILL}" '
        'stroke="#3949ab"/>',
        f'<text x="68" y="{legend_y}" font-size="11" dominant-baseline="middle">a slot: '
        "position name, module attribute</text>",
        f'<rect x="400" y="{legend_y - 10}" width="40" height="20" fill="{_LAYER_FILL}" '
        f'stroke="{_CONV_STROKE}" stroke-width="2" stroke-dasharray="5,3"/>',
        f'<text x="448" y="{legend_y}" font-size="11" dominant-baseline="middle">replaced by '
        "a block at position conv</text>",
    ]
    width = _LEFT + len(LAYOUTS) * _COL - 60
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{legend_y + 20}" '
        f'viewBox="0 0 {width} {legend_y + 20}" font-family="sans-serif">\n'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" '
        'markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#555"/></marker></defs>\n'
        '<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(parts) + "\n</svg>\n"
    )
