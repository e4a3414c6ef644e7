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
* attributes ``avgpool`` (a :func:`classifier_head` pool), ``fc``, ``num_features``,
  ``num_classes``, ``drop_rate`` and ``feature_info`` (one dict per feature index:
  ``num_chs``, ``reduction``, ``module``).

This module has no ``from __future__ import annotations``: ``torch.fx`` copies the traced root's
``forward`` annotations into the generated code, and a string annotation (``'torch.Tensor'``)
comes out as the unknown type ``_torch_Tensor_``, which ``torch.jit.script`` refuses. With real
annotations a model traced by timm's fx feature extraction can be scripted.
"""

from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import SelectAdaptivePool2d
from timm.models._features import FeatureGetterNet, feature_take_indices
from torch.utils.checkpoint import checkpoint

from .checkpoint import load_checkpoint

__all__ = [
    "GLOBAL_POOLS",
    "FeatureStages",
    "TimmModelMixin",
    "check_global_pool",
    "classifier_head",
]

#: timm's global pooling types (``SelectAdaptivePool2d``); ``""`` leaves the features unpooled
GLOBAL_POOLS = ("avg", "max", "avgmax", "catavgmax", "")


def check_global_pool(global_pool: str, num_classes: int) -> None:
    """Raise ``ValueError`` for a pooling type timm does not have, or for no pooling
    (``""``) in front of a classifier."""
    if global_pool not in GLOBAL_POOLS:
        raise ValueError(
            f"global_pool must be one of {list(GLOBAL_POOLS)} (timm's pooling types), "
            f"got {global_pool!r}"
        )
    if not global_pool and num_classes > 0:
        raise ValueError(
            "global_pool='' (no pooling) needs num_classes=0: a linear classifier cannot take "
            "an unpooled map"
        )


def classifier_head(
    num_features: int, num_classes: int, global_pool: str = "avg"
) -> tuple[nn.Module, nn.Module]:
    """timm's classifier head: the global pool (``SelectAdaptivePool2d``, flattening) and the
    linear classifier (an identity for ``num_classes=0``). ``catavgmax`` concatenates average
    and max pooling, so the classifier sees ``2 * num_features`` inputs; ``""`` keeps the
    ``(N, num_features, H, W)`` map, which only makes sense without a classifier.

    Raises:
        ValueError: an unknown ``global_pool``, or ``""`` with ``num_classes > 0``.
    """
    check_global_pool(global_pool, num_classes)
    # max pooling in timm's "fast" form (mean / amax over H, W, the same values): its adaptive
    # form does not compile with TorchScript
    pool_type = global_pool if global_pool in ("", "avg") else f"fast{global_pool}"
    pool = SelectAdaptivePool2d(pool_type=pool_type, flatten=bool(global_pool))
    width = num_features * pool.feat_mult()
    fc = nn.Linear(width, num_classes) if num_classes > 0 else nn.Identity()
    return pool, fc


class TimmModelMixin:
    """timm's classification and feature interface (see the module docstring)."""

    # (``feature_info``, a list of dicts set by each model, is not annotated here: TorchScript
    # would try to type it from the annotation)
    grad_checkpointing: bool = False
    # plain Python attributes: TorchScript would otherwise compile the properties
    __jit_unused_properties__ = ["head_hidden_size", "global_pool"]

    # ------------------------------------------------------------------ head

    @property
    def head_hidden_size(self) -> int:
        """Width of the pooled features the classifier sees (timm's attribute): twice
        ``num_features`` with ``catavgmax`` pooling."""
        return self.num_features * self.avgpool.feat_mult()

    @property
    def global_pool(self) -> str:
        """The global pooling type (timm's name): ``avg``, ``max``, ``avgmax``, ``catavgmax``
        or ``""`` (none)."""
        return self.avgpool.pool_type.removeprefix("fast")

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """``(N, num_features, H', W') -> (N, num_classes)``, or the pooled ``(N,
        head_hidden_size)`` with ``pre_logits=True`` (the unpooled map with
        ``global_pool=""``)."""
        x = self.avgpool(x)
        if self.drop_rate:
            x = F.dropout(x, p=self.drop_rate, training=self.training)
        return x if pre_logits else self.fc(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def get_classifier(self) -> nn.Module:
        return self.fc

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """Replace the classifier by a freshly initialised one with ``num_classes`` outputs
        (``0`` gives an identity: the model then returns pooled features, as in timm), and the
        global pooling by ``global_pool`` (one of :data:`GLOBAL_POOLS`; ``None`` keeps the
        current one; ``""`` with ``num_classes=0`` returns the unpooled feature map)."""
        pool, fc = classifier_head(
            self.num_features, num_classes, self.global_pool if global_pool is None else global_pool
        )
        self.num_classes = num_classes
        self.avgpool, self.fc = pool, fc
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


class FeatureStages(FeatureGetterNet):
    """What ``timm.create_model("visattn_<name>", features_only=True)`` returns: timm's
    ``FeatureGetterNet`` (the features of the model's ``forward_intermediates``, the same
    modules and state-dict keys), which ``torch.jit.script`` can also compile.

    timm's getter is not scriptable (its index helper formats f-strings, and
    ``forward_intermediates`` runs a Python list of stages), so under TorchScript the forward
    runs the model's ``scripted_intermediates(x, take)`` instead: the same features, with the
    stages written out. smp's timm-universal encoders (``tu-visattn_*``) script through it."""

    def __init__(self, model: nn.Module, out_indices=4, **kwargs) -> None:
        super().__init__(model, out_indices, **kwargs)
        take, _ = feature_take_indices(len(model.feature_info), self.out_indices)
        self.take: list[int] = [int(i) for i in take]

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        if not torch.jit.is_scripting():
            return super().forward(x)
        return self.model.scripted_intermediates(x, self.take)
