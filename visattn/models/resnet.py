"""ResNets with attention slots: CIFAR ResNets, the pre-activation ResNet-164 and the ImageNet
ResNets of torchvision.

* CIFAR ResNets: He, Zhang, Ren, Sun, "Deep Residual Learning for Image Recognition", CVPR 2016,
  Sec. 4.2: a 3x3 stem of 16 channels, three stages of ``n`` BasicBlocks with 16/32/64 channels
  (depth ``6n + 2``), no max-pool; shortcut option A (zero-padding identity, the paper's) or B
  (1x1 projection).
* ``preresnet164_cifar``: He, Zhang, Ren, Sun, "Identity Mappings in Deep Residual Networks",
  ECCV 2016: pre-activation bottlenecks, 18 per stage, 64/128/256 output channels.
* ImageNet ResNet-18..152: parameter names and counts identical to ``torchvision.models``
  (stride on the 3x3 convolution of the Bottleneck, "ResNet v1.5"), so torchvision or timm
  state_dicts load unchanged.

Attention placement is data (see :mod:`visattn.models.placement`): every residual block has
seven *slots*, ``attn_pre``, ``attn_prenorm``, ``attn_inner``, ``attn_standard``,
``attn_identity``, ``attn_post`` and ``attn_output``, and every stage a slot ``attn_stage``; all
are ``nn.Identity`` (no parameters, no state_dict keys) until a placement fills them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import NamedTuple

import torch
import torch.nn as nn
from timm.layers import DropPath

from ..blocks._units import PreActBottleneck as _PreActUnit
from ..blocks._units import ResidualSlots
from ..blocks._units import conv1x1 as _conv1x1
from ..blocks._units import conv3x3 as _conv3x3
from ..blocks._units import make_shortcut as _shortcut
from ..constants import BLOCK_POSITIONS
from .features import TimmModelMixin, classifier_head

__all__ = [
    "BasicBlock",
    "Bottleneck",
    "PreActBottleneck",
    "ResNet",
    "ResNetStage",
    "SlottedBlock",
]


class SlottedBlock(ResidualSlots):
    """Base of residual blocks with attention slots.

    Subclasses set ``in_channels``, ``mid_channels`` (output of the middle convolution) and
    ``out_channels`` and call :meth:`init_slots` after creating their layers. The slots are:

    * ``attn_pre``: on the residual branch's input, immediately before its first convolution;
    * ``attn_prenorm``: between the branch's last 3x3 convolution (``conv2``) and the norm that
      follows it (``bn2`` in a post-activation block, ``bn3`` in a pre-activation unit), where
      SimAM's authors put their module (Yang et al., ICML 2021, ``ZjjConan/SimAM``);
    * ``attn_inner``: between the middle convolution stage (conv, norm, activation in
      post-activation blocks) and the next convolution;
    * ``attn_standard``: on the residual branch's output (after its last norm), before the sum;
    * ``attn_identity``: on the shortcut's output (after a projection or padding, if any),
      in parallel with the residual branch;
    * ``attn_post``: on the sum, before the block's final activation (if any);
    * ``attn_output``: on the block's output, after its final activation: a block between two
      residual blocks, as the non-local and BAT papers insert theirs.

    Placement position ``conv`` replaces the residual branch's middle convolution, the attribute
    named by :attr:`conv_slot` (``conv2``, the 3x3 of a bottleneck; ``conv1``, the first 3x3 of a
    basic block), by a conv-replacing block with the same input and output channels and stride;
    the forward calls whatever module that attribute holds.
    """

    # no class-level annotations of in/mid/out_channels: TorchScript cannot read postponed ones
    conv_slot = "conv2"

    def slot_channels(self, position: str) -> int:
        """Channels of the tensor the slot at ``position`` sees."""
        if position == "pre":
            return self.in_channels
        if position in ("inner", "prenorm"):
            return self.mid_channels
        if position == "conv":
            return getattr(self, self.conv_slot).in_channels
        if position in BLOCK_POSITIONS:
            return self.out_channels
        raise ValueError(
            f"unknown block position {position!r}; valid: {[*BLOCK_POSITIONS, 'conv']}"
        )

    def zero_init_last(self) -> None:
        """Zero the last layer of the residual branch, so the block starts as the identity."""
        raise NotImplementedError


class BasicBlock(SlottedBlock):
    """Two 3x3 convolutions (He et al., CVPR 2016, Fig. 2 left); torchvision's parameter names.

    ``inner`` is after ``relu(bn1(conv1(x)))``, ``prenorm`` between ``conv2`` and ``bn2``;
    position ``conv`` replaces ``conv1``.
    ``dilation`` dilates both convolutions, except that ``conv1`` takes ``first_dilation`` where
    given (timm's ``BasicBlock``: the first block of a dilated stage keeps the previous stage's
    dilation on its first conv). Shapes:
    ``(N, in_channels, H, W) -> (N, planes, ceil(H / stride), ceil(W / stride))``.
    """

    expansion = 1
    conv_slot = "conv1"
    inner_first = True

    def __init__(
        self,
        in_channels: int,
        planes: int,
        stride: int = 1,
        *,
        shortcut: str = "B",
        drop_path: float = 0.0,
        dilation: int = 1,
        first_dilation: int | None = None,
    ) -> None:
        super().__init__()
        self.in_channels, self.mid_channels, self.out_channels = in_channels, planes, planes
        self.stride, self.dilation = stride, dilation
        self.conv1 = _conv3x3(in_channels, planes, stride, first_dilation or dilation)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes, 1, dilation)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = _shortcut(in_channels, planes, stride, shortcut)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.init_slots()

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, (x if self.downsample is None else self.downsample(x))

    def branch_start(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.bn1(self.conv1(x)))

    def branch_middle(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(x)

    def branch_end(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn2(x)

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(x)

    def zero_init_last(self) -> None:
        nn.init.zeros_(self.bn2.weight)


class Bottleneck(SlottedBlock):
    """1x1-3x3-1x1 bottleneck (He et al., CVPR 2016, Fig. 5 right), stride on the 3x3 as in
    torchvision ("ResNet v1.5"), or on the first 1x1 with ``stride_in_1x1=True`` (the original
    Caffe ResNets and SENets, "v1"); torchvision's parameter names.

    ``prenorm`` is between ``conv2`` and ``bn2``, ``inner`` after ``relu(bn2(conv2(.)))``, both
    on ``planes`` channels; position ``conv`` replaces ``conv2`` (the 3x3, with its stride).
    ``conv2`` is dilated by ``first_dilation`` where given, else ``dilation`` (timm's
    ``Bottleneck``). Shapes:
    ``(N, in_channels, H, W) -> (N, 4 * planes, ceil(H / stride), ceil(W / stride))``.
    """

    expansion = 4

    def __init__(
        self,
        in_channels: int,
        planes: int,
        stride: int = 1,
        *,
        shortcut: str = "B",
        drop_path: float = 0.0,
        dilation: int = 1,
        first_dilation: int | None = None,
        stride_in_1x1: bool = False,
    ) -> None:
        super().__init__()
        out = planes * self.expansion
        self.in_channels, self.mid_channels, self.out_channels = in_channels, planes, out
        self.stride, self.dilation = stride, dilation
        s1, s3 = (stride, 1) if stride_in_1x1 else (1, stride)
        self.conv1 = _conv1x1(in_channels, planes, s1)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, s3, first_dilation or dilation)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, out)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(in_channels, out, stride, shortcut)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.init_slots()

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, (x if self.downsample is None else self.downsample(x))

    def branch_start(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.relu(self.bn1(self.conv1(x))))

    def branch_middle(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.bn2(x))

    def branch_end(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn3(self.conv3(x))

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(x)

    def zero_init_last(self) -> None:
        nn.init.zeros_(self.bn3.weight)


class PreActBottleneck(_PreActUnit, SlottedBlock):
    """The pre-activation bottleneck of :mod:`visattn.blocks._units` (He et al., ECCV 2016;
    one implementation, shared with the Residual Attention module) as a slotted block of a
    :class:`ResNet`. See the unit for the layers, slots and shapes; position ``conv`` replaces
    ``conv2`` (the 3x3)."""


class ResNetStage(nn.Sequential):
    """A stage: residual blocks registered as ``"0"``, ``"1"``, ... (torchvision's names),
    followed by the stage slot ``attn_stage``.

    Indexing, ``len`` and iteration cover the blocks only, so ``model.layer4[-1]`` is the last
    residual block as in torchvision. It is an ``nn.Sequential`` (children in order, the slot
    last) so that TorchScript, which only iterates such containers, compiles its forward.

    Shapes: the blocks' composition.
    """

    def __init__(self, blocks: Iterable[nn.Module]) -> None:
        super().__init__()
        n = 0
        for n, block in enumerate(blocks, start=1):
            self.add_module(str(n - 1), block)
        if n == 0:
            raise ValueError("a ResNet stage needs at least one block")
        self.num_blocks = n
        self.attn_stage = nn.Identity()

    def _index(self, idx: int) -> str:
        if not -self.num_blocks <= idx < self.num_blocks:
            raise IndexError(f"block index {idx} out of range for a stage of {self.num_blocks}")
        return str(idx % self.num_blocks)

    def __getitem__(self, idx: int | slice) -> nn.Module:
        if isinstance(idx, slice):
            return nn.Sequential(*list(self)[idx])
        return self._modules[self._index(idx)]

    def __setitem__(self, idx: int, block: nn.Module) -> None:
        setattr(self, self._index(idx), block)

    def __len__(self) -> int:
        return self.num_blocks

    def __iter__(self) -> Iterator[nn.Module]:
        return (self._modules[str(i)] for i in range(self.num_blocks))

    def __prepare_scriptable__(self) -> ResNetStage:
        """Called by ``torch.jit.script``: the scripted forward relies on the slot being the last
        child."""
        names = list(self._modules)
        if names != [*map(str, range(self.num_blocks)), "attn_stage"]:
            raise TypeError(
                f"ResNetStage children must be the blocks then 'attn_stage' to be scripted, "
                f"got {names}"
            )
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_scripting():
            # TorchScript iterates every child of a Sequential in order: blocks, then the slot
            for module in self:
                x = module(x)
            return x
        for block in self:  # the blocks only (see __iter__)
            x = block(x)
        return self.attn_stage(x)


def _check_layout(
    layers: Sequence[int],
    planes: Sequence[int],
    strides: Sequence[int],
    stem: str,
    shortcut: str,
) -> None:
    """Refuse a ResNet layout that cannot be built, naming the argument at fault."""
    if len(strides) != len(layers) or any(
        isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in strides
    ):
        raise ValueError(
            f"strides must hold one positive int per stage ({len(layers)}), got {strides!r}"
        )
    if stem not in ("imagenet", "cifar"):
        raise ValueError(f"stem must be 'imagenet' or 'cifar', got {stem!r}")
    if shortcut not in ("A", "B"):
        raise ValueError(
            f"shortcut must be 'A' (zero padding) or 'B' (1x1 projection), got {shortcut!r}"
        )
    if len(layers) != len(planes):
        raise ValueError(f"layers {list(layers)} and planes {list(planes)} differ in length")
    if not 1 <= len(layers) <= 4:
        raise ValueError(f"a ResNet has 1 to 4 stages (layer1..layer4), got {len(layers)}")


#: timm's output strides for dense prediction (``timm.create_model(..., output_stride=)``)
OUTPUT_STRIDES = (8, 16, 32)


def _check_output_stride(output_stride: int, block: type, stem: str) -> None:
    if output_stride == 32:
        return
    if output_stride not in OUTPUT_STRIDES:
        raise ValueError(
            f"output_stride must be one of {list(OUTPUT_STRIDES)}, got {output_stride!r}"
        )
    if stem != "imagenet" or block not in (BasicBlock, Bottleneck):
        raise ValueError(
            "output_stride (dilated stages) needs an ImageNet-stem ResNet of basic or bottleneck "
            f"blocks; this one has a {stem!r} stem and {block.__name__} blocks"
        )


def _check_variant(
    block: type,
    stem: str,
    stride_in_1x1: bool,
    stem_pool_ceil: bool,
    drop_rates: tuple[float, float],
) -> None:
    """Refuse the Caffe-layout options where they do not apply, and drop rates outside [0, 1)."""
    if stride_in_1x1 and block is not Bottleneck:
        raise ValueError(
            f"stride_in_1x1 needs Bottleneck blocks (a 1x1 conv to stride); this ResNet has "
            f"{block.__name__} blocks"
        )
    if stem_pool_ceil and stem != "imagenet":
        raise ValueError(f"stem_pool_ceil needs the ImageNet stem's max-pool; stem is {stem!r}")
    if not all(0.0 <= rate < 1.0 for rate in drop_rates):
        raise ValueError("drop_rate and drop_path_rate must be in [0, 1)")


def _stride_in_1x1(enabled: bool) -> dict[str, bool]:
    # only Bottleneck takes the option (checked by _check_variant)
    return {"stride_in_1x1": True} if enabled else {}


class StageLayout(NamedTuple):
    """How a stage downsamples: its first block's ``stride``, the dilation of that block's
    strided conv (``first_dilation``) and of every other 3x3 conv (``dilation``), and the total
    stride (``reduction``) of the stage's output."""

    stride: int
    first_dilation: int
    dilation: int
    reduction: int


def _stage_layouts(strides: Sequence[int], stem: str, output_stride: int) -> list[StageLayout]:
    """Each stage's :class:`StageLayout`: a stage whose stride would take the total past
    ``output_stride`` keeps stride 1 and multiplies the dilation by the stride it gave up
    (timm's ``output_stride``); the first block keeps the previous dilation."""
    reduction = 4 if stem == "imagenet" else 1  # the ImageNet stem's conv and max-pool
    dilation = 1
    layouts = []
    for stride in strides:
        first_dilation = dilation
        if reduction * stride > output_stride:  # dilate instead of striding
            dilation, stride = dilation * stride, 1
        reduction *= stride
        layouts.append(StageLayout(stride, first_dilation, dilation, reduction))
    return layouts


def _drop_paths(layers: Sequence[int], rate: float) -> list[list[float]]:
    """Stochastic-depth rates per stage, rising linearly from 0 to ``rate`` over all blocks."""
    total = sum(layers)
    rates = [rate * index / max(total - 1, 1) for index in range(total)]
    starts = [sum(layers[:i]) for i in range(len(layers))]
    return [rates[start : start + n] for start, n in zip(starts, layers)]


def _make_stage(
    make_block: Callable[..., SlottedBlock],
    in_channels: int,
    width: int,
    layout: StageLayout,
    drop_paths: Sequence[float],
) -> ResNetStage:
    """``len(drop_paths)`` blocks of ``width``; the first takes ``layout.stride`` and
    ``in_channels``. Dilation is passed only where it is not 1 (the pre-activation block has
    none)."""
    blocks = []
    for j, drop_path in enumerate(drop_paths):
        dilated = {} if layout.dilation == 1 else {"dilation": layout.dilation}
        if j == 0 and dilated:
            dilated["first_dilation"] = layout.first_dilation
        stride = layout.stride if j == 0 else 1
        block = make_block(in_channels, width, stride, drop_path=drop_path, **dilated)
        blocks.append(block)
        in_channels = width * block.expansion
    return ResNetStage(blocks)


class ResNet(TimmModelMixin, nn.Module):
    """A ResNet with attention slots.

    Module names follow torchvision: ``conv1``, ``bn1``, ``relu``, ``maxpool``, ``layer1`` ...,
    ``avgpool``, ``fc``; pre-activation networks add ``bn_final`` + ``relu_final`` before pooling
    (and have no ``bn1``/``relu`` after the stem). Parameter-free parts that a variant lacks are
    ``nn.Identity``.

    Args:
        block: the residual block class.
        layers: blocks per stage.
        planes: base width of each stage (output channels are ``planes * block.expansion``).
        stem: ``"imagenet"`` (7x7/2 conv + 3x3/2 max-pool) or ``"cifar"`` (3x3/1 conv).
        stem_channels: output channels of the stem convolution.
        shortcut: ``"A"`` zero padding or ``"B"`` 1x1 projection where the shape changes.
        num_classes: classifier outputs.
        in_chans: input channels.
        drop_rate: dropout before the classifier.
        drop_path_rate: stochastic depth, rising linearly to this rate over the blocks.
        zero_init_residual: zero the last norm (conv for pre-activation) of each residual branch.
        strides: stride of the first block of each stage (default ``1, 2, 2, ...``); e.g.
            ``(1, 2, 2, 1)`` keeps a 14x14 final map at 224x224 input (GSoP-Net1's layout).
        output_stride: the largest total stride, 8, 16 or 32 (timm's option, for dense
            prediction such as DeepLab): a stage whose stride would take the total past it
            keeps stride 1 and dilates its 3x3 convolutions by the stride it gave up, as timm's
            ``resnet.py`` does (the first block's strided conv keeps the previous dilation).
            Parameters are unchanged; only ImageNet-stem networks of basic or bottleneck
            blocks have it (a CIFAR network never exceeds stride 4).
        stride_in_1x1: a downsampling :class:`Bottleneck` strides its first 1x1 conv instead of
            its 3x3 (the Caffe ResNets of He et al. and the SENets of Hu et al.; timm's
            ``legacy_seresnet*``). Bottleneck networks only.
        stem_pool_ceil: the stem's 3x3/2 max-pool has no padding and rounds its output size up
            (Caffe's pooling, ``ceil_mode=True``; timm's ``legacy_seresnet*``), instead of
            torchvision's padding of 1. ImageNet stem only.

    Shapes: ``(N, in_chans, H, W) -> (N, num_classes)``; any ``H, W`` the strides allow.

    timm's interface (:class:`visattn.models.features.TimmModelMixin`): ``feature_info`` has the
    stem (after its activation, timm's ``act1``; ``relu`` here, ``conv1`` for pre-activation
    networks, whose stem is the bare convolution) and every stage ``layer1``.. (the last one
    after ``bn_final``/``relu_final`` for pre-activation networks), with channels and total
    stride; ``forward_intermediates``, ``set_grad_checkpointing`` (per stage),
    ``reset_classifier``, ``forward_head(pre_logits=)``.
    """

    def __init__(
        self,
        block: type[SlottedBlock],
        layers: Sequence[int],
        *,
        planes: Sequence[int] = (64, 128, 256, 512),
        stem: str = "imagenet",
        stem_channels: int = 64,
        shortcut: str = "B",
        num_classes: int = 1000,
        in_chans: int = 3,
        drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        zero_init_residual: bool = False,
        strides: Sequence[int] | None = None,
        output_stride: int = 32,
        stride_in_1x1: bool = False,
        stem_pool_ceil: bool = False,
    ) -> None:
        super().__init__()
        if strides is None:
            strides = (1,) + (2,) * (len(layers) - 1)
        _check_layout(layers, planes, strides, stem, shortcut)
        _check_output_stride(output_stride, block, stem)
        _check_variant(block, stem, stride_in_1x1, stem_pool_ceil, (drop_rate, drop_path_rate))
        preact = block is PreActBottleneck
        self.num_classes = num_classes
        self.in_chans = in_chans
        self.drop_rate = drop_rate
        self.default_input_size = (in_chans, 224, 224) if stem == "imagenet" else (in_chans, 32, 32)
        self._make_stem(stem, in_chans, stem_channels, stem_pool_ceil, preact)
        self.feature_info = [
            {
                "num_chs": stem_channels,
                "reduction": 2 if stem == "imagenet" else 1,
                "module": "conv1" if preact else "relu",
            }
        ]
        self.stage_names: tuple[str, ...] = tuple(f"layer{i + 1}" for i in range(len(layers)))
        make_block = partial(block, shortcut=shortcut, **_stride_in_1x1(stride_in_1x1))
        layouts = _stage_layouts(strides, stem, output_stride)
        drop_paths = _drop_paths(layers, drop_path_rate)
        cin = stem_channels
        for i, name in enumerate(self.stage_names):
            setattr(self, name, _make_stage(make_block, cin, planes[i], layouts[i], drop_paths[i]))
            cin = planes[i] * block.expansion
            last = "relu_final" if (preact and i == len(layers) - 1) else name
            self.feature_info.append(
                {"num_chs": cin, "reduction": layouts[i].reduction, "module": last}
            )
        self.num_features = cin
        self.bn_final = nn.BatchNorm2d(cin) if preact else nn.Identity()
        self.relu_final = nn.ReLU(inplace=True) if preact else nn.Identity()
        self.avgpool, self.fc = classifier_head(cin, num_classes)
        self._init_weights(zero_init_residual)

    def _make_stem(
        self, stem: str, in_chans: int, channels: int, pool_ceil: bool, preact: bool
    ) -> None:
        """``conv1``, ``maxpool``, ``bn1``, ``relu`` (the last two ``nn.Identity`` for
        pre-activation networks, whose first block normalises the stem's output)."""
        if stem == "imagenet":
            self.conv1 = nn.Conv2d(in_chans, channels, 7, 2, 3, bias=False)
            self.maxpool: nn.Module = (
                nn.MaxPool2d(3, 2, ceil_mode=True) if pool_ceil else nn.MaxPool2d(3, 2, 1)
            )
        else:
            self.conv1 = _conv3x3(in_chans, channels)
            self.maxpool = nn.Identity()
        self.bn1 = nn.Identity() if preact else nn.BatchNorm2d(channels)
        self.relu = nn.Identity() if preact else nn.ReLU(inplace=True)

    def _init_weights(self, zero_init_residual: bool) -> None:
        # torchvision's initialisation (He et al., ICCV 2015, fan-out) for conv and norm layers
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, SlottedBlock):
                    m.zero_init_last()

    def stages(self) -> list[ResNetStage]:
        return [getattr(self, n) for n in self.stage_names]

    def forward_stem(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.bn1(self.conv1(x)))

    def forward_stem_pool(self, x: torch.Tensor) -> torch.Tensor:
        return self.maxpool(x)

    def feature_stages(self) -> list[nn.Module]:
        return self.stages()

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, in_chans, H, W) -> (N, num_features, H', W')``."""
        if not torch.jit.is_scripting():
            return super().forward_features(x)  # the feature API's loop (grad checkpointing)
        return self.scripted_intermediates(x, [-1])[0]  # the last feature: the normed map

    def forward_norm(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu_final(self.bn_final(x))

    def scripted_intermediates(self, x: torch.Tensor, take: list[int]) -> list[torch.Tensor]:
        """``forward_intermediates(x, take, intermediates_only=True)`` with the stages written
        out (at most four, see __init__): TorchScript cannot look up a variable list of named
        submodules, but folds ``hasattr``. ``forward_features`` and :class:`FeatureStages` run
        it under TorchScript."""
        x = self.forward_stem(x)
        outs = [x]
        x = self.layer1(self.forward_stem_pool(x))
        outs.append(x)
        if hasattr(self, "layer2"):
            x = self.layer2(x)
            outs.append(x)
        if hasattr(self, "layer3"):
            x = self.layer3(x)
            outs.append(x)
        if hasattr(self, "layer4"):
            x = self.layer4(x)
            outs.append(x)
        outs[-1] = self.forward_norm(outs[-1])
        return [outs[i] for i in take]

    def prune_stages(self, n: int) -> None:
        for name in self.stage_names[n:]:
            delattr(self, name)
        self.stage_names = self.stage_names[:n]

    def prune_norm(self) -> None:
        self.bn_final, self.relu_final = nn.Identity(), nn.Identity()
