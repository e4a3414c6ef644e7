"""Softmax attention ``softmax(q k^T * scale + bias) v`` with its logits and softmax in float32.

Used by the area, agent and bi-level routing attention blocks. Under autocast (bf16 or fp16) the
logits of a matrix product can leave the low-precision range and the softmax's normaliser loses
digits; here autocast is switched off inside, the inputs are cast up to float32 (float64 stays
float64), and the result is cast back to the value's dtype.
"""

from __future__ import annotations

import torch

__all__ = ["softmax_attention_fp32"]


def _attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, bias: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    dt = torch.promote_types(q.dtype, torch.float32)
    logits = (q.to(dt) * scale) @ k.to(dt).transpose(-2, -1)
    if bias is not None:
        logits = logits + bias.to(dt)
    a = torch.softmax(logits, dim=-1)
    return (a @ v.to(dt)).to(v.dtype), a


def softmax_attention_fp32(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(softmax(q k^T * scale + bias) v, softmax(...))`` over the last two dimensions.

    ``q``: ``(..., Lq, d)``, ``k``: ``(..., Lk, d)``, ``v``: ``(..., Lk, dv)``; ``bias``
    broadcasts to ``(..., Lq, Lk)`` (``-inf`` masks a key). Returns the output ``(..., Lq, dv)``
    in ``v``'s dtype and the weights ``(..., Lq, Lk)`` in float32 (or float64).

    ``torch.fx`` records it as one call (``torch.fx.wrap`` below), so a traced graph keeps the
    float32 region; TorchScript, which applies no autocast by default, runs the same operations
    without the context.
    """
    if torch.jit.is_scripting():  # TorchScript's autocast needs a constant device type
        return _attention(q, k, v, scale, bias)
    with torch.autocast(device_type=q.device.type, enabled=False):
        return _attention(q, k, v, scale, bias)


torch.fx.wrap("softmax_attention_fp32")
