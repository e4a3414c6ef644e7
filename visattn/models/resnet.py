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

Attention placement is data (see :mod:`visattn.models.placement`): every residual block has five
*slots*, ``attn_pre``, ``attn_inner``, ``attn_standard``, ``attn_identity`` and ``attn_post``,
and every stage a slot ``attn_stage``; all are ``nn.Identity`` (no parameters, no state_dict
keys) until a placement fills them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import DropPath

__all__ = [
    "BLOCK_POSITIONS",
    "BasicBlock",
    "Bottleneck",
    "PreActBottleneck",
    "ResNet",
    "ResNetStage",
    "SlottedBlock",
    "ZeroPadShortcut",
]

BLOCK_POSITIONS = ("pre", "inner", "standard", "identity", "post")


class SlottedBlock(nn.Module):
    """Base of residual blocks with attention slots.

    Subclasses set ``in_channels``, ``mid_channels`` (output of the middle convolution) and
    ``out_channels`` and call :meth:`init_slots` after creating their layers. The slots are:

    * ``attn_pre``: on the residual branch's input, immediately before its first convolution;
    * ``attn_inner``: between the middle convolution stage (conv, norm, activation in
      post-activation blocks) and the next convolution;
    * ``attn_standard``: on the residual branch's output (after its last norm), before the sum;
    * ``attn_identity``: on the shortcut's output (after a projection or padding, if any),
      in parallel with the residual branch;
    * ``attn_post``: on the sum, before the block's final activation (if any).
    """

    # (no class-level annotations of these: TorchScript cannot read postponed ones)

    def init_slots(self) -> None:
        for position in BLOCK_POSITIONS:
            setattr(self, f"attn_{position}", nn.Identity())

    def slot_channels(self, position: str) -> int:
        """Channels of the tensor the slot at ``position`` sees."""
        if position == "pre":
            return self.in_channels
        if position == "inner":
            return self.mid_channels
        if position in BLOCK_POSITIONS:
            return self.out_channels
        raise ValueError(f"unknown block position {position!r}; valid: {list(BLOCK_POSITIONS)}")

    def zero_init_last(self) -> None:
        """Zero the last layer of the residual branch, so the block starts as the identity."""
        raise NotImplementedError


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride, 1, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride, bias=False)


class ZeroPadShortcut(nn.Module):
    """Shortcut option A of He et al. (CVPR 2016): identity on the first ``in_channels``
    channels, zeros for the extra ones, spatial subsampling by ``stride``. No parameters.

    Shapes: ``(N, Cin, H, W) -> (N, Cout, ceil(H / stride), ceil(W / stride))``.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        if out_channels < in_channels:
            raise ValueError(
                f"shortcut A pads channels and cannot reduce {in_channels} to {out_channels}; "
                "use shortcut='B'"
            )
        self.extra = out_channels - in_channels
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride > 1:
            x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, 0, self.extra)) if self.extra else x

    def extra_repr(self) -> str:
        return f"extra_channels={self.extra}, stride={self.stride}"


def _shortcut(
    cin: int, cout: int, stride: int, kind: str, *, norm: bool = True
) -> nn.Module | None:
    if stride == 1 and cin == cout:
        return None
    if kind == "A":
        return ZeroPadShortcut(cin, cout, stride)
    if kind == "B":
        conv = _conv1x1(cin, cout, stride)
        return nn.Sequential(conv, nn.BatchNorm2d(cout)) if norm else conv
    raise ValueError(f"shortcut must be 'A' (zero padding) or 'B' (1x1 projection), got {kind!r}")


class BasicBlock(SlottedBlock):
    """Two 3x3 convolutions (He et al., CVPR 2016, Fig. 2 left); torchvision's parameter names.

    ``inner`` is after ``relu(bn1(conv1(x)))``. Shapes:
    ``(N, in_channels, H, W) -> (N, planes, ceil(H / stride), ceil(W / stride))``.
    """

    expansion = 1

    def __init__(
        self,
        in_channels: int,
        planes: int,
        stride: int = 1,
        *,
        shortcut: str = "B",
        drop_path: float = 0.0,
    ) -> None:
        super().__init__()
        self.in_channels, self.mid_channels, self.out_channels = in_channels, planes, planes
        self.stride = stride
        self.conv1 = _conv3x3(in_channels, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = _shortcut(in_channels, planes, stride, shortcut)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.init_slots()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.attn_pre(x)
        out = self.relu(self.bn1(self.conv1(out)))
        out = self.attn_inner(out)
        out = self.bn2(self.conv2(out))
        out = self.drop_path(self.attn_standard(out))
        out = out + self.attn_identity(shortcut)
        out = self.attn_post(out)
        return self.relu(out)

    def zero_init_last(self) -> None:
        nn.init.zeros_(self.bn2.weight)


class Bottleneck(SlottedBlock):
    """1x1-3x3-1x1 bottleneck (He et al., CVPR 2016, Fig. 5 right), stride on the 3x3 as in
    torchvision ("ResNet v1.5"); torchvision's parameter names.

    ``inner`` is after ``relu(bn2(conv2(.)))``, on ``planes`` channels. Shapes:
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
    ) -> None:
        super().__init__()
        out = planes * self.expansion
        self.in_channels, self.mid_channels, self.out_channels = in_channels, planes, out
        self.stride = stride
        self.conv1 = _conv1x1(in_channels, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, out)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(in_channels, out, stride, shortcut)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.init_slots()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.attn_pre(x)
        out = self.relu(self.bn1(self.conv1(out)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.attn_inner(out)
        out = self.bn3(self.conv3(out))
        out = self.drop_path(self.attn_standard(out))
        out = out + self.attn_identity(shortcut)
        out = self.attn_post(out)
        return self.relu(out)

    def zero_init_last(self) -> None:
        nn.init.zeros_(self.bn3.weight)


class PreActBottleneck(SlottedBlock):
    """Pre-activation bottleneck (He et al., ECCV 2016, Fig. 1b / 4e):
    ``BN-ReLU-1x1 - BN-ReLU-3x3(stride) - BN-ReLU-1x1`` plus the shortcut, which is the identity
    or, when the shape changes, a 1x1 projection (option B, no BN) or zero padding (option A) of
    the *pre-activated* input (as in the authors' code, the first BN-ReLU is shared).

    Slots: ``pre`` sees ``relu(bn1(x))`` (the input of the first convolution); ``inner`` the
    output of the 3x3 convolution (before ``bn3``, the next stage's pre-activation); ``standard``
    the output of ``conv3``; there is no final activation, so ``post`` sees the block output.

    Shapes: ``(N, in_channels, H, W) -> (N, 4 * planes, ceil(H / stride), ceil(W / stride))``.
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
    ) -> None:
        super().__init__()
        out = planes * self.expansion
        self.in_channels, self.mid_channels, self.out_channels = in_channels, planes, out
        self.stride = stride
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv1 = _conv1x1(in_channels, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn3 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(in_channels, out, stride, shortcut, norm=False)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.init_slots()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.relu(self.bn1(x))
        shortcut = x if self.downsample is None else self.downsample(pre)
        out = self.conv1(self.attn_pre(pre))
        out = self.conv2(self.relu(self.bn2(out)))
        out = self.attn_inner(out)
        out = self.conv3(self.relu(self.bn3(out)))
        out = self.drop_path(self.attn_standard(out))
        out = out + self.attn_identity(shortcut)
        return self.attn_post(out)

    def zero_init_last(self) -> None:
        nn.init.zeros_(self.conv3.weight)


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


class ClassifierHead:
    """timm's classifier interface for a network with ``avgpool``, ``fc``, ``num_features``,
    ``num_classes``, ``drop_rate`` and ``forward_features``: global average pooling, dropout,
    linear layer."""

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = torch.flatten(self.avgpool(x), 1)
        if self.drop_rate:
            x = F.dropout(x, p=self.drop_rate, training=self.training)
        return x if pre_logits else self.fc(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def get_classifier(self) -> nn.Module:
        return self.fc

    def reset_classifier(self, num_classes: int) -> None:
        """Replace the classifier by a freshly initialised one with ``num_classes`` outputs
        (``0`` gives an identity, as in timm)."""
        self.num_classes = num_classes
        self.fc = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()


class ResNet(ClassifierHead, nn.Module):
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

    Shapes: ``(N, in_chans, H, W) -> (N, num_classes)``; any ``H, W`` the strides allow.
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
    ) -> None:
        super().__init__()
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
        if not 0.0 <= drop_rate < 1.0 or not 0.0 <= drop_path_rate < 1.0:
            raise ValueError("drop_rate and drop_path_rate must be in [0, 1)")
        preact = block is PreActBottleneck
        self.num_classes = num_classes
        self.in_chans = in_chans
        self.drop_rate = drop_rate
        self.default_input_size = (in_chans, 224, 224) if stem == "imagenet" else (in_chans, 32, 32)
        if stem == "imagenet":
            self.conv1 = nn.Conv2d(in_chans, stem_channels, 7, 2, 3, bias=False)
            self.maxpool: nn.Module = nn.MaxPool2d(3, 2, 1)
        else:
            self.conv1 = _conv3x3(in_chans, stem_channels)
            self.maxpool = nn.Identity()
        self.bn1 = nn.Identity() if preact else nn.BatchNorm2d(stem_channels)
        self.relu = nn.Identity() if preact else nn.ReLU(inplace=True)

        total = sum(layers)
        index = 0
        cin = stem_channels
        self.stage_names: tuple[str, ...] = tuple(f"layer{i + 1}" for i in range(len(layers)))
        for i, (n, width) in enumerate(zip(layers, planes)):
            blocks = []
            for j in range(n):
                dp = drop_path_rate * index / max(total - 1, 1)
                stride = 2 if (i > 0 and j == 0) else 1
                blocks.append(block(cin, width, stride, shortcut=shortcut, drop_path=dp))
                cin = width * block.expansion
                index += 1
            setattr(self, self.stage_names[i], ResNetStage(blocks))
        self.num_features = cin
        self.bn_final = nn.BatchNorm2d(cin) if preact else nn.Identity()
        self.relu_final = nn.ReLU(inplace=True) if preact else nn.Identity()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes) if num_classes > 0 else nn.Identity()
        self._init_weights(zero_init_residual)

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

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, in_chans, H, W) -> (N, num_features, H', W')``."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        # the stages written out (at most four, see __init__): TorchScript cannot look up a
        # variable list of named submodules, but folds hasattr
        x = self.layer1(x)
        if hasattr(self, "layer2"):
            x = self.layer2(x)
        if hasattr(self, "layer3"):
            x = self.layer3(x)
        if hasattr(self, "layer4"):
            x = self.layer4(x)
        return self.relu_final(self.bn_final(x))
