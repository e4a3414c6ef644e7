"""visattn: a zoo of visual attention blocks for CNNs.

The public API (see README): blocks (``register_block``, ``list_blocks``, ``block_info``,
``create_block``, and ``timm_attn`` for timm's ``attn_layer``/``se_layer``), attention maps
(``capture_attention``) and models (``create_model``, ``list_models``, ``inject``), released
weights (``list_pretrained``, ``load_pretrained``) and deployment (``export_onnx``).
"""

from ._safe_path import drop_working_folder

drop_working_folder()  # first: python -m's working folder must not supply torch, lightning, ...

from .blocks import (  # noqa: E402
    block_info,
    capture_attention,
    create_block,
    list_blocks,
    register_block,
    timm_attn,
)
from .export import export_onnx  # noqa: E402
from .models import create_model, inject, list_models  # noqa: E402
from .models.pretrained import list_pretrained, load_pretrained  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "block_info",
    "capture_attention",
    "create_block",
    "create_model",
    "export_onnx",
    "inject",
    "list_blocks",
    "list_models",
    "list_pretrained",
    "load_pretrained",
    "register_block",
    "timm_attn",
]
