"""Backbones (CIFAR / ImageNet ResNets, Residual Attention Networks), attention placement by
config, injection into torchvision / timm ResNets, and the model factory."""

from .checkpoint import LoadReport, load_checkpoint
from .factory import (
    ModelSpec,
    UnknownModelError,
    create_model,
    eca_placements,
    get_model_spec,
    list_models,
    register_model,
    register_timm_models,
)
from .inject import inject
from .placement import POSITIONS, apply_placements, normalize_placements
from .residual_attention import ResidualAttentionNet
from .resnet import BasicBlock, Bottleneck, PreActBottleneck, ResNet, ResNetStage

__all__ = [
    "POSITIONS",
    "BasicBlock",
    "Bottleneck",
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
    "register_timm_models",
]
