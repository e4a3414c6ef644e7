"""timm's model interface for visattn networks, as timm's ``resnet.py`` has it: a classifier
head (``forward_head``, ``get_classifier``, ``reset_classifier``), ``feature_info``,
``forward_features``, ``forward_intermediates`` and ``prune_intermediate_layers`` (which
timm's ``features_only=True`` builds on, through ``FeatureGetterNet``) and
``set_grad_checkpointing``.

A network using :class:`TimmModelMixin` provides:

* ``forward_stem(x)``: the stem up to its activation (feature index 0, timm's ``act1``);
* ``forward_stem_pool(x)``: what follows it before the first stage (ImageNet stems' max-pool);
* ``feature_stages()``: the stages, in order (feature indices 1..S);
* ``forward_norm(x)``: the final norm/activation after the last stage (identity where there is
  none); the last feature includes it, so it is the map the head pools;
* ``prune_stages(n)`` / ``prune_norm()``: drop the stages after the ``n``-th / the final norm;
* attributes ``avgpool``, ``fc``, ``num_features``, ``num_classes``, ``drop_rate`` and
  ``feature_info`` (one dict per feature index: ``num_chs``, ``reduction``, ``module``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.models._features import feature_take_indices
from torch.utils.checkpoint import checkpoint

from .checkpoint import load_checkpoint

__all__ = ["TimmModelMixin"]


class TimmModelMixin:
    """timm's classification and feature interface (see the module docstring)."""

    # (``feature_info``, a list of dicts set by each model, is not annotated here: TorchScript
    # would try to type it from the annotation)
    grad_checkpointing: bool = False

    # ------------------------------------------------------------------ head

    @property
    def head_hidden_size(self) -> int:
        """Width of the pooled features the classifier sees (timm's attribute)."""
        return self.num_features

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """``(N, num_features, H', W') -> (N, num_classes)``, or the pooled ``(N,
        num_features)`` with ``pre_logits=True``."""
        x = torch.flatten(self.avgpool(x), 1)
        if self.drop_rate:
            x = F.dropout(x, p=self.drop_rate, training=self.training)
        return x if pre_logits else self.fc(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def get_classifier(self) -> nn.Module:
        return self.fc

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """Replace the classifier by a freshly initialised one with ``num_classes`` outputs
        (``0`` gives an identity: the model then returns pooled features of size
        ``num_features``, as in timm). Only average pooling exists (``global_pool="avg"``)."""
        if global_pool not in (None, "avg"):
            raise ValueError(f"global_pool must be 'avg' (the only pooling), got {global_pool!r}")
        self.num_classes = num_classes
        self.fc = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()
        if hasattr(self, "pretrained_cfg"):
            self.pretrained_cfg = {**self.pretrained_cfg, "num_classes": num_classes}

    def load_pretrained(self, path: str) -> None:
        """timm's hook for ``pretrained=True`` with a local ``file``: load a visattn,
        torchvision or timm state_dict with :func:`visattn.models.load_checkpoint` (attention
        keys new; the classifier kept at its initialisation if ``num_classes`` differs)."""
        load_checkpoint(self, path, classifier="if_matching")

    # ------------------------------------------------------------------ features

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each stage in the backward pass instead of storing its activations."""
        self.grad_checkpointing = enable

    def group_matcher(self, coarse: bool = False) -> dict[str, str]:
        """timm's parameter grouping (layer-wise learning-rate decay): stem, then stages."""
        return {"stem": r"^(conv1|bn1|stem)", "blocks": r"^(layer|stages\.)(\d+)"}

    def _run_stage(self, stage: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():  # noqa: SIM102 (TorchScript skips this block whole)
            if self.grad_checkpointing and torch.is_grad_enabled():
                return checkpoint(stage, x, use_reentrant=False)
        return stage(x)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, in_chans, H, W) -> (N, num_features, H', W')``: the map the head pools."""
        x = self.forward_stem_pool(self.forward_stem(x))
        for stage in self.feature_stages():
            x = self._run_stage(stage, x)
        return self.forward_norm(x)

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: int | Sequence[int] | None = None,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
    ) -> list[torch.Tensor] | tuple[torch.Tensor, list[torch.Tensor]]:
        """timm's ``forward_intermediates``: the features at ``indices`` of
        :attr:`feature_info` (0 = stem, 1.. = stages; an int ``n`` = the last ``n``; ``None`` =
        all), each ``(N, feature_info[i]["num_chs"], H / reduction, W / reduction)``.

        Returns the list of features if ``intermediates_only``, else ``(final features,
        list)``; the last stage's feature includes the final norm (``norm`` is accepted for
        timm's signature; no other feature has a norm to apply). ``stop_early`` stops after
        the deepest requested feature (then the final features are that one)."""
        if output_fmt != "NCHW":
            raise ValueError(f"output_fmt must be 'NCHW', got {output_fmt!r}")
        stages = self.feature_stages()
        take, max_index = feature_take_indices(len(self.feature_info), indices)
        intermediates = []
        x = self.forward_stem(x)
        if 0 in take:
            intermediates.append(x)
        x = self.forward_stem_pool(x)
        run = stages[:max_index] if (stop_early or intermediates_only) else stages
        for i, stage in enumerate(run, start=1):
            x = self._run_stage(stage, x)
            if i == len(self.feature_info) - 1:
                x = self.forward_norm(x)
            if i in take:
                intermediates.append(x)
        if intermediates_only:
            return intermediates
        return x, intermediates

    def prune_intermediate_layers(
        self,
        indices: int | Sequence[int] = 1,
        prune_norm: bool = False,
        prune_head: bool = True,
    ) -> list[int]:
        """Drop the stages after the deepest of ``indices`` (and the classifier with
        ``prune_head``), as timm does before wrapping a model for ``features_only``. The
        final norm goes with the last stage (``prune_norm`` is accepted for timm's
        signature: the last feature includes the norm). Returns the feature indices."""
        take, max_index = feature_take_indices(len(self.feature_info), indices)
        self.prune_stages(max_index)
        if max_index < len(self.feature_info) - 1:
            self.prune_norm()
        if prune_head:
            self.reset_classifier(0)
        return take
