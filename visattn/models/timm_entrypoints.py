"""timm entrypoints of the visattn models, ``visattn_<name>``.

timm's ``register_model`` files each entrypoint under its ``__module__`` (adding the name to
that module's ``__all__`` and reading its ``default_cfgs``); this real module is that home.
:mod:`visattn.models.timm_bridge` fills it; nothing here is meant to be called directly
(use ``timm.create_model("visattn_<name>")`` or :func:`visattn.create_model`).
"""

from __future__ import annotations

from typing import Any

__all__: list[str] = []

#: ``visattn_<name>`` -> timm pretrained config dict (filled by the bridge)
default_cfgs: dict[str, dict[str, Any]] = {}
