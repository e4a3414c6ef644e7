"""Constants shared across the package, importable without the training extras: the placement
positions and per-channel normalisation statistics of [0, 1] pixels, keyed by dataset."""

from __future__ import annotations

__all__ = [
    "BLOCK_POSITIONS",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "CIFAR100_MEAN",
    "CIFAR100_STD",
    "HOOK_SLOTS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "MAX_IMAGE_SIZE",
    "POSITIONS",
    "SLOT_POSITIONS",
    "STATS",
]

#: the largest image side accepted (training, export): 4096 px is past any classification recipe
#: (ImageNet models train at 224-600 px), and one 4096 px float batch of 64 already needs 12 GiB.
MAX_IMAGE_SIZE = 4096

#: where a placement may put a block (names from the SE paper's integration study, plus
#: ``stage``, ``conv``, ``output`` and ``prenorm``); see :mod:`visattn.models.placement`
POSITIONS = (
    "standard",
    "pre",
    "post",
    "identity",
    "inner",
    "stage",
    "conv",
    "output",
    "prenorm",
)
#: the positions inside a residual block, each an ``attn_<position>`` slot, in the order a
#: Bottleneck's forward reaches them (the order its slots are created in, hence of their
#: parameters; a BasicBlock, whose last 3x3 is its second conv, reaches ``prenorm`` after
#: ``inner``)
BLOCK_POSITIONS = ("pre", "prenorm", "inner", "standard", "identity", "post", "output")
#: the positions that fill an ``attn_<position>`` slot (all but ``conv``, which replaces a conv)
SLOT_POSITIONS = (*BLOCK_POSITIONS, "stage")
#: the child names of blocks placed ``after`` / ``before`` a module by pattern (their forward
#: hooks call them; see :mod:`visattn.models.sites`)
HOOK_SLOTS = ("attn_after", "attn_before")

Triple = tuple[float, float, float]

IMAGENET_MEAN: Triple = (0.485, 0.456, 0.406)
IMAGENET_STD: Triple = (0.229, 0.224, 0.225)
CIFAR10_MEAN: Triple = (0.4914, 0.4822, 0.4465)
CIFAR10_STD: Triple = (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN: Triple = (0.5071, 0.4865, 0.4409)
CIFAR100_STD: Triple = (0.2673, 0.2564, 0.2762)

#: per-channel (mean, std) of [0, 1] pixels, by dataset name
STATS: dict[str, tuple[Triple, Triple]] = {
    "cifar10": (CIFAR10_MEAN, CIFAR10_STD),
    "cifar100": (CIFAR100_MEAN, CIFAR100_STD),
    "imagenet": (IMAGENET_MEAN, IMAGENET_STD),
    "imagefolder": (IMAGENET_MEAN, IMAGENET_STD),  # ImageNet's
    "shapes": ((0.245, 0.242, 0.239), (0.258, 0.250, 0.257)),  # measured on 2,000 images
}
