"""Backbones (CIFAR / ImageNet ResNets, Residual Attention Networks), attention placement by
config (ResNet stages and blocks, or module patterns in any CNN), injection into torchvision,
timm and other CNNs, and the model factory.

Modules: :mod:`.builders` (functions that build a backbone), :mod:`.registry` (``ModelSpec``,
names, listing), :mod:`.zoo` (the named models), :mod:`.factory` (``create_model``),
:mod:`.timm_bridge` (timm registration, following the registry, and construction),
:mod:`.checkpoint` (weights).
"""

from . import timm_bridge
from .checkpoint import LoadReport, load_checkpoint
from .factory import create_model
from .inject import inject
from .placement import apply_placements, normalize_placements
from .registry import ModelSpec, UnknownModelError, get_model_spec, list_models, register_model
from .residual_attention import ResidualAttentionNet
from .resnet import BasicBlock, Bottleneck, PreActBottleneck, ResNet, ResNetStage
from .sites import InjectionPlan
from .zoo import ECA_NET50_KERNELS, eca_placements

timm_bridge.connect()  # every listed model is a timm model from here on

__all__ = [
    "ECA_NET50_KERNELS",
    "BasicBlock",
    "Bottleneck",
    "InjectionPlan",
    "LoadReport",
    "ModelSpec",
    "PreActBottleneck",
    "ResNet",
    "ResNetStage",
    "ResidualAttentionNet",
    "UnknownModelError",
    "apply_placements",
    "create_model",
    "eca_placements",
    "get_model_spec",
    "inject",
    "list_models",
    "load_checkpoint",
    "normalize_placements",
    "register_model",
]
