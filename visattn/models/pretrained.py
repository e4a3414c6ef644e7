"""Released ImageNet weights for the named models: pretrained tags and checked converters.

A **tag** (:class:`PretrainedTag`) names a released file for a visattn model, timm style
(``se_resnet50.ra2_in1k``): where it is published (a Hugging Face hub id or a URL), its
checksum where one is published, the evaluation transform its authors used (input size,
``crop_pct``, interpolation, mean/std), its published top-1, and the **source**: the key
layout of the file. Each source has a **converter** (:func:`register_converter`) that maps the
released layout into visattn's: prefixes and nesting stripped, module names mapped, shapes
reconciled (a ``nn.Linear`` weight into a 1x1 conv, a swapped pair of pooled maps).

:func:`load_pretrained` reads a file (weights only: no code runs), converts it and loads it
**strictly both ways**: every tensor of the file must be consumed and every parameter and
buffer of the model filled, with the same shape. Anything else raises ``ValueError`` naming
the leftovers on each side; nothing is loaded partially.

Through timm, ``timm.create_model("visattn_se_resnet50.ra2_in1k", pretrained=True)`` downloads
the tag's file (on a connected machine) and loads it through the same converter; offline,
``pretrained_cfg_overlay=dict(file=PATH)`` loads a local copy.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ..blocks.gct import GatedChannelTransformation
from .checkpoint import _mismatch_phrases, _shape_mismatches, read_state_dict, unwrap_state_dict
from .zoo import ECA_RELEASED_KERNELS

__all__ = [
    "PretrainedTag",
    "convert_state_dict",
    "get_pretrained",
    "list_converters",
    "list_pretrained",
    "load_pretrained",
    "register_converter",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

Converter = Callable[[dict[str, torch.Tensor], nn.Module], dict[str, torch.Tensor]]


@dataclass(frozen=True, kw_only=True)
class PretrainedTag:
    """A released weight file for a visattn model.

    Attributes:
        model: the visattn model name (``se_resnet50``); timm's is ``visattn_<model>.<tag>``.
        tag: the tag (``ra2_in1k``).
        source: the converter of the file's key layout (:func:`list_converters`).
        top1: the published ImageNet-1k top-1 (%), as its publisher reports it (timm's tags:
            timm's results table at 224x224 with the tag's ``crop_pct``).
        hf_hub_id / url: where the file can be downloaded from (``hf_hub_id`` is what timm
            downloads; ``url`` a direct link).
        page: where the authors publish it for download by hand (a Google Drive, Baidu or
            Dropbox page: no library can fetch those), when there is no direct link.
        sha256: the published checksum or its published prefix (torch.hub's file-name
            convention); empty where none is published.
        input_size, crop_pct, interpolation, mean, std: the evaluation transform.
        test_input_size, test_crop_pct: the publisher's test-time size, where it differs.
        num_classes: the classifier's outputs in the file.
        publisher: who trained it (paper or library).
        proof: what the offline test proves about the mapping.
    """

    model: str
    tag: str
    source: str
    top1: float
    hf_hub_id: str = ""
    url: str = ""
    page: str = ""
    sha256: str = ""
    input_size: tuple[int, int, int] = (3, 224, 224)
    test_input_size: tuple[int, int, int] | None = None
    crop_pct: float = 0.875
    test_crop_pct: float | None = None
    interpolation: str = "bilinear"
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    num_classes: int = 1000
    publisher: str = ""
    proof: str = ""
    notes: str = ""

    @property
    def name(self) -> str:
        """``<model>.<tag>``."""
        return f"{self.model}.{self.tag}"

    @property
    def downloadable(self) -> bool:
        """Whether timm can download the file (a hub id or a direct URL)."""
        return bool(self.hf_hub_id or self.url)

    def pretrained_cfg(self) -> dict[str, Any]:
        """timm's pretrained config of this tag (``hf_hub_id``/``url``, eval transform)."""
        cfg: dict[str, Any] = {
            "hf_hub_id": self.hf_hub_id or None,
            "url": self.url if not self.hf_hub_id else "",
            "input_size": self.input_size,
            "crop_pct": self.crop_pct,
            "interpolation": self.interpolation,
            "mean": self.mean,
            "std": self.std,
            "num_classes": self.num_classes,
            "first_conv": "conv1",
            "classifier": "fc",
            "notes": (
                f"source: {self.source}; published top-1 {self.top1:.2f}",
                *([f"download by hand: {self.page}"] if self.page else []),
            ),
        }
        if self.test_input_size is not None:
            cfg["test_input_size"] = self.test_input_size
        if self.test_crop_pct is not None:
            cfg["test_crop_pct"] = self.test_crop_pct
        return cfg


_TAGS: dict[str, PretrainedTag] = {}
_CONVERTERS: dict[str, Converter] = {}


def register_pretrained(tag: PretrainedTag) -> PretrainedTag:
    """Add ``tag``; a taken ``<model>.<tag>`` or an unknown source raises ``ValueError``."""
    if tag.name in _TAGS:
        raise ValueError(f"pretrained tag {tag.name!r} is already registered")
    if tag.source not in _CONVERTERS:
        raise ValueError(
            f"pretrained tag {tag.name!r}: unknown source {tag.source!r}; "
            f"known: {', '.join(sorted(_CONVERTERS))}"
        )
    _TAGS[tag.name] = tag
    return tag


def list_pretrained(pattern: str | None = None) -> list[PretrainedTag]:
    """The registered tags (``fnmatch`` ``pattern`` on ``<model>.<tag>``), sorted by name; each
    carries its source and published top-1."""
    return [_TAGS[n] for n in sorted(_TAGS) if pattern is None or fnmatch.fnmatchcase(n, pattern)]


def get_pretrained(name: str) -> PretrainedTag:
    """The tag ``<model>.<tag>`` (timm's ``visattn_`` prefix accepted); unknown names raise
    ``KeyError`` naming the model's tags or the closest names."""
    key = name[len("visattn_") :] if name.startswith("visattn_") else name
    if key in _TAGS:
        return _TAGS[key]
    model = key.split(".", 1)[0]
    same = [n for n in _TAGS if n.startswith(model + ".")]
    hint = f"; {model!r} has {', '.join(sorted(same))}" if same else ""
    raise KeyError(f"unknown pretrained tag {name!r}{hint} (see visattn.list_pretrained())")


def register_converter(source: str) -> Callable[[Converter], Converter]:
    """Decorator: ``fn(state_dict, model) -> state_dict`` maps the layout ``source`` into
    visattn's. A taken name raises ``ValueError``."""

    def deco(fn: Converter) -> Converter:
        if source in _CONVERTERS:
            raise ValueError(f"converter {source!r} is already registered")
        _CONVERTERS[source] = fn
        return fn

    return deco


def list_converters() -> list[str]:
    """Names of the registered key layouts (``source=`` of :func:`load_pretrained`)."""
    return sorted(_CONVERTERS)


# --------------------------------------------------------------------------- reading files


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_sha256(path: str | PathLike[str], expected: str) -> None:
    """Raise ``ValueError`` unless the file's sha256 starts with ``expected`` (a full digest or
    the published prefix, as in torch.hub's ``name-<prefix>.pth``)."""
    expected = expected.lower()
    if not re.fullmatch(r"[0-9a-f]{8,64}", expected):
        raise ValueError(f"sha256 must be 8 to 64 hex digits, got {expected!r}")
    actual = _sha256(Path(path))
    if not actual.startswith(expected):
        raise ValueError(
            f"checksum mismatch for {str(path)!r}: sha256 {actual[: len(expected)]}... but "
            f"{expected}... was published; the file is damaged or not the released one"
        )


# --------------------------------------------------------------------------- converting


def convert_state_dict(
    state: Mapping[str, torch.Tensor], model: nn.Module, source: str
) -> dict[str, torch.Tensor]:
    """``state`` in the layout ``source`` mapped into ``model``'s keys (not yet checked)."""
    if source not in _CONVERTERS:
        raise ValueError(
            f"unknown source {source!r}; known key layouts: {', '.join(list_converters())}"
        )
    return _CONVERTERS[source](dict(state), model)


def check_complete(
    state: Mapping[str, torch.Tensor], model: nn.Module, what: str, *, except_prefix: str = ""
) -> None:
    """Raise ``ValueError`` unless ``state`` fills every parameter and buffer of ``model`` with
    the same shape and has nothing else: the leftovers of each side are named (missing: model
    tensors the file does not fill; unexpected: file tensors nothing consumes). Keys starting
    with ``except_prefix`` (a classifier about to be replaced) are left out on both sides."""
    own = model.state_dict()
    if except_prefix:
        own = {k: v for k, v in own.items() if not k.startswith(except_prefix)}
        state = {k: v for k, v in state.items() if not k.startswith(except_prefix)}
    problems = _mismatch_phrases(
        [k for k in own if k not in state],  # not filled
        [k for k in state if k not in own],  # not consumed
        _shape_mismatches(own, state),
    )
    if problems:
        raise ValueError(
            f"{what} does not fit {getattr(model, 'model_name', type(model).__name__)}: "
            + "; ".join(problems)
            + ". Nothing was loaded (a checkpoint of another architecture, or a model built "
            "with other options than the authors')"
        )


def load_pretrained(
    model: nn.Module,
    path: str | PathLike[str],
    *,
    source: str = "visattn",
    sha256: str = "",
) -> nn.Module:
    """Load a released weight file into ``model``, converting its key layout.

    Args:
        model: a visattn model built as the file's authors built it (for a tag, the tag's
            model; :func:`list_pretrained` says which).
        path: the file (``.pth``/``.pth.tar``/``.bin`` read weights-only, or ``.safetensors``).
        source: the file's key layout, one of :func:`list_converters` (``"timm"``,
            ``"cbam_official"``, ``"eca_official"``, ...); ``"visattn"`` for visattn's own.
        sha256: a published checksum (or its published prefix) the file must match.

    Returns:
        ``model``, with every parameter and buffer loaded.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a directory, an empty, unreadable or truncated file
            (:class:`~visattn.models.checkpoint.CheckpointError`, as
            :func:`~visattn.models.checkpoint.read_state_dict` reads it), a checksum mismatch,
            an unknown source, or a file that does not fill the model exactly (leftovers named
            on both sides).
    """
    if sha256:
        check_sha256(path, sha256)
    state = convert_state_dict(read_state_dict(path)[0], model, source)
    check_complete(state, model, f"weight file {str(path)!r} (source {source!r})")
    model.load_state_dict(state, strict=True)
    return model


def timm_filter_fn(tag: PretrainedTag) -> Callable[[dict, nn.Module], dict]:
    """timm's ``pretrained_filter_fn`` for ``tag``: unwrap, convert, check completeness. A model
    with another number of classes than the file (fine-tuning) is checked without its
    classifier, which timm then leaves at its initialisation."""

    def filter_fn(state: dict, model: nn.Module) -> dict:
        out = convert_state_dict(unwrap_state_dict(state)[0], model, tag.source)
        new_head = getattr(model, "num_classes", tag.num_classes) != tag.num_classes
        head = (getattr(model, "pretrained_cfg", None) or {}).get("classifier") or "fc"
        check_complete(
            out,
            model,
            f"pretrained weights of {tag.name!r} (source {tag.source!r})",
            except_prefix=f"{head}." if new_head else "",
        )
        return out

    return filter_fn


# --------------------------------------------------------------------------- key layouts


def _rename(state: dict[str, torch.Tensor], rules: list[tuple[str, str]]) -> dict:
    """Apply regex ``(pattern, replacement)`` rules in order to every key."""
    out = {}
    for k, v in state.items():
        for pat, rep in rules:
            k = re.sub(pat, rep, k)
        out[k] = v
    return out


def _as_conv1x1(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """2-D ``nn.Linear`` weights where the model holds a 1x1 conv: add the two unit dims."""
    own = model.state_dict()
    return {
        k: v[:, :, None, None] if k in own and v.dim() == 2 and own[k].dim() == 4 else v
        for k, v in state.items()
    }


@register_converter("visattn")
def _visattn(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """visattn's own layout (a visattn state_dict or Lightning checkpoint's ``net.``)."""
    if any(k.startswith("net.") for k in state):
        state = {k[4:]: v for k, v in state.items() if k.startswith("net.")}
    return state


@register_converter("timm")
def _timm(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """timm's ResNet family (``seresnet*``, ``skresnet*``, ``resnet*``): the attention module
    ``layerX.Y.se`` is visattn's slot ``attn_standard``; timm's SelectiveKernel conv keeps its
    paths as ``ConvNormAct`` (``paths.i.conv``/``.bn``) and its attention under ``attn``, where
    visattn's SK conv holds ``paths.i.0``/``.1`` and the attention layers directly; timm's
    SK BasicBlock's second conv is a ``ConvNormAct`` (``conv2.conv``/``conv2.bn``)."""
    return _rename(
        state,
        [
            (r"\.se\.", ".attn_standard."),
            (r"(\.conv\d)\.paths\.(\d+)\.conv\.", r"\1.paths.\2.0."),
            (r"(\.conv\d)\.paths\.(\d+)\.bn\.", r"\1.paths.\2.1."),
            (r"(\.conv\d)\.attn\.", r"\1."),
            (r"\.conv2\.conv\.", ".conv2."),
            (r"\.conv2\.bn\.", ".bn2."),
        ],
    )


def _strides_first_1x1(model: nn.Module) -> bool:
    """Whether the model's first downsampling bottleneck (``layer2.0``) strides its first 1x1
    conv (the original MSRA ResNet, ``stride_in_1x1=True``) rather than its 3x3."""
    first = getattr(getattr(model, "layer2", None), "0", None)
    return getattr(getattr(first, "conv1", None), "stride", (1, 1)) == (2, 2)


@register_converter("timm_legacy_senet")
def _timm_legacy_senet(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """timm's ``legacy_seresnet*`` (its port of Hu et al.'s Caffe SENets, from Cadene's
    ``pretrainedmodels``): the stem under ``layer0`` (``conv1``, ``bn1``), the SE module
    ``layerX.Y.se_module`` (1x1 convs ``fc1``/``fc2`` with bias, visattn's ``attn_standard``)
    and the classifier ``last_linear``. The network itself differs from torchvision's (stride on
    the first 1x1 conv, a ceil-mode stem pool): load it into ``legacy_se_resnet50``; a model of
    torchvision's layout has the same keys but computes another function, so it is refused."""
    caffe = getattr(getattr(model, "maxpool", None), "ceil_mode", False)
    if not (caffe and _strides_first_1x1(model)):
        raise ValueError(
            f"timm's legacy SENet weights need the Caffe layout (stride on the first 1x1 conv, "
            f"a ceil-mode stem pool); {getattr(model, 'model_name', type(model).__name__)} has "
            "torchvision's, which has the same keys but computes another function: build "
            "legacy_se_resnet50 (or resnet options stride_in_1x1=True, stem_pool_ceil=True)"
        )
    return _rename(
        state,
        [
            (r"^layer0\.(conv1|bn1)\.", r"\1."),
            (r"\.se_module\.", ".attn_standard."),
            (r"^last_linear\.", "fc."),
        ],
    )


@register_converter("gct_official")
def _gct_official(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """Yang et al.'s released GCT-ResNet-50 (z-x-yang/GCT, ``PyTorch/resnet.py``, saved by their
    ``main.py`` under ``state_dict`` with DDP's ``module.``): every conv is wrapped as
    ``nn.Sequential(GCT, conv)`` (``convN.0``/``convN.1``; ``downsample.0`` GCT, ``.1`` conv,
    ``.2`` BN) and the stem sits under ``stem``. visattn's ``gct_resnet50_official`` hooks each
    GCT on its conv (``<conv>.attn_before``). The network strides a downsampling bottleneck's
    first 1x1 conv and its GCTs add eps to the channel mean: a model built otherwise has the
    same keys but another function, so it is refused."""
    name = getattr(model, "model_name", type(model).__name__)
    if not _strides_first_1x1(model):
        raise ValueError(
            f"the authors' GCT-ResNet-50 strides the first 1x1 conv of a downsampling "
            f"bottleneck; {name} strides its 3x3 (the same keys, another function): build "
            "gct_resnet50_official (or resnet options stride_in_1x1=True)"
        )
    gcts = [(p, m) for p, m in model.named_modules() if isinstance(m, GatedChannelTransformation)]
    paper = [p for p, m in gcts if not m.official]
    if paper and any(k.endswith(".0.alpha") for k in state):  # the file holds the authors' GCTs
        raise ValueError(
            f"the authors' GCTs add eps to the channel mean; {name}'s at {', '.join(paper[:3])}"
            + (f" (and {len(paper) - 3} more)" if len(paper) > 3 else "")
            + " use the paper's form: build gct_resnet50_official (gct option norm='official')"
        )
    return _rename(
        state,
        [
            (r"^stem\.", ""),
            (r"(^|\.)(conv\d)\.0\.(alpha|gamma|beta)$", r"\1\2.attn_before.\3"),
            (r"\.downsample\.0\.(alpha|gamma|beta)$", r".downsample.0.attn_before.\1"),
            (r"(^|\.)(conv\d)\.1\.weight$", r"\1\2.weight"),
            (r"\.downsample\.1\.weight$", ".downsample.0.weight"),
            (r"\.downsample\.2\.", ".downsample.1."),
        ],
    )


@register_converter("sk_pytorchinsight")
def _sk_pytorchinsight(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """Li's released SK-ResNet-50 (implus/PytorchInsight, ``resnet_sk.py``, saved under
    ``state_dict`` with DataParallel's ``module.``): each Bottleneck holds its two 3x3 paths
    ``conv2``/``bn2`` (dense) and ``conv2g``/``bn2g`` (32 groups) and the fuse/select layers
    ``conv_fc1``, ``bn_fc1``, ``conv_fc2`` flat in the block; visattn's ``sk_resnet50`` holds them
    in the SK conv that replaces ``conv2`` (``paths.0``, ``paths.1``, ``fc_reduce``, ``bn``,
    ``fc_select``)."""
    block = r"^(layer\d+\.\d+)\."
    return _rename(
        state,
        [
            (block + r"conv2\.weight$", r"\1.conv2.paths.0.0.weight"),
            (block + r"bn2\.", r"\1.conv2.paths.0.1."),
            (block + r"conv2g\.weight$", r"\1.conv2.paths.1.0.weight"),
            (block + r"bn2g\.", r"\1.conv2.paths.1.1."),
            (block + r"conv_fc1\.", r"\1.conv2.fc_reduce."),
            (block + r"bn_fc1\.", r"\1.conv2.bn."),
            (block + r"conv_fc2\.", r"\1.conv2.fc_select."),
        ],
    )


@register_converter("cbam_official")
def _cbam_official(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """Woo et al.'s released CBAM ResNets (Jongchan/attention-module): ``layerX.Y.cbam`` with
    ``ChannelGate.mlp.{1,3}`` (``nn.Linear``) and ``SpatialGate.spatial.{conv,bn}`` (a conv
    without bias and a BN; build the model with ``use_bn=True``). Their spatial gate pools
    ``[max; mean]``, visattn's ``[mean; max]``: the conv's two input channels are swapped."""
    out = _rename(
        state,
        [
            (r"\.cbam\.ChannelGate\.mlp\.1\.", ".attn_standard.channel.fc1."),
            (r"\.cbam\.ChannelGate\.mlp\.3\.", ".attn_standard.channel.fc2."),
            (r"\.cbam\.SpatialGate\.spatial\.conv\.", ".attn_standard.spatial.conv."),
            (r"\.cbam\.SpatialGate\.spatial\.bn\.", ".attn_standard.spatial.bn."),
        ],
    )
    for k, v in out.items():
        if k.endswith("attn_standard.spatial.conv.weight") and v.shape[1] == 2:
            out[k] = v.flip(1).contiguous()
    return _as_conv1x1(out, model)


#: the authors' BAM sub-module names -> index in visattn's ``layout="official"`` Sequentials
_BAM_OFFICIAL = {
    r"channel_att\.gate_c\.gate_c_fc_0": "channel.0",
    r"channel_att\.gate_c\.gate_c_bn_1": "channel.1",
    r"channel_att\.gate_c\.gate_c_fc_final": "channel.3",
    r"spatial_att\.gate_s\.gate_s_conv_reduce0": "spatial.0",
    r"spatial_att\.gate_s\.gate_s_bn_reduce0": "spatial.1",
    r"spatial_att\.gate_s\.gate_s_conv_di_0": "spatial.3",
    r"spatial_att\.gate_s\.gate_s_bn_di_0": "spatial.4",
    r"spatial_att\.gate_s\.gate_s_conv_di_1": "spatial.6",
    r"spatial_att\.gate_s\.gate_s_bn_di_1": "spatial.7",
    r"spatial_att\.gate_s\.gate_s_conv_final": "spatial.9",
}


@register_converter("bam_official")
def _bam_official(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """Park et al.'s released BAM-ResNet-50 (Jongchan/attention-module, the CBAM file's repo):
    ``bam1``..``bam3`` after layer1..layer3 are visattn's stage slots ``layerN.attn_stage``,
    with ``channel_att.gate_c`` (``nn.Linear`` + ``BatchNorm1d``) and ``spatial_att.gate_s``
    as the block's ``layout="official"`` (build ``bam_resnet50_official``); the linears become
    1x1 convs."""
    rules = [(r"^bam(\d)\.", r"layer\1.attn_stage.")]
    rules += [(rf"\.attn_stage\.{k}\.", f".attn_stage.{v}.") for k, v in _BAM_OFFICIAL.items()]
    return _as_conv1x1(_rename(state, rules), model)


@register_converter("fca_official")
def _fca_official(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """Qin et al.'s released FcaNets (cfzd/FcaNet, torch.hub ``fca34``..``fca152``):
    ``layerX.Y.att`` with ``fc.0``/``fc.2`` (bias-free ``nn.Linear``) is visattn's
    ``attn_standard.fc1``/``fc2``. Their fixed DCT filters are a buffer in the file
    (``att.dct_layer.weight``, ``(C, S, S)``) that visattn computes instead: each is compared
    with the filters the model's block computes at that size (frequencies, channel split,
    orthonormal scaling) and consumed; a filter that differs is named (a model built with
    other ``freq_sel``/``dct_size``/``dct_norm`` than the file's top16 at 56/28/14/7)."""
    out = _rename(
        state,
        [(r"\.att\.fc\.0\.", ".attn_standard.fc1."), (r"\.att\.fc\.2\.", ".attn_standard.fc2.")],
    )
    modules = dict(model.named_modules())
    differ = []
    for key in [k for k in out if k.endswith(".att.dct_layer.weight")]:
        filt = out.pop(key)
        block = modules.get(key[: -len(".att.dct_layer.weight")] + ".attn_standard")
        if not hasattr(block, "dct_filters") or filt.dim() != 3:
            out[key] = filt  # nothing to compare with: left for the completeness check to name
            continue
        ours = block.dct_filters(filt.shape[1], filt.shape[2], torch.float64)
        if ours.shape != filt.shape or not torch.allclose(ours, filt.double(), atol=1e-6):
            differ.append(key)
    if differ:
        raise ValueError(
            f"the file's DCT filters differ from the model's at {', '.join(differ[:4])}"
            + (f" (and {len(differ) - 4} more)" if len(differ) > 4 else "")
            + ": build the model with the file's frequencies (fca_resnet*: top16, DCT sizes "
            "56/28/14/7, orthonormal). Nothing was loaded"
        )
    return out


@register_converter("eca_official")
def _eca_official(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """Wang et al.'s released ECA-Nets (BangguWu/ECANet): ``layerX.Y.eca.conv.weight``, a
    ``Conv1d(1, 1, k)`` whose ``k`` per stage must equal the model's (ECA-Net50: 3, 5, 5, 7)."""
    return _rename(state, [(r"\.eca\.conv\.", ".attn_standard.conv.")])


@register_converter("simam_official")
def _simam_official(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """Yang et al.'s released SimAM ResNets (ZjjConan/SimAM): torchvision's keys, except that
    the parameter-free SimAM module wraps ``conv2`` as ``nn.Sequential(conv2, simam)``, so the
    middle conv's weight is ``layerX.Y.conv2.0.weight``. SimAM has no parameters, so a plain
    ResNet's file would fill the model too: a file whose ``conv2`` is not wrapped is refused,
    naming its keys."""
    plain = sorted(k for k in state if re.fullmatch(r"layer\d+\.\d+\.conv2\.weight", k))
    if plain:
        raise ValueError(
            f"not a SimAM file: conv2 is not wrapped with SimAM ({', '.join(plain[:3])}"
            + (f" and {len(plain) - 3} more" if len(plain) > 3 else "")
            + "; the authors' files hold layerX.Y.conv2.0.weight): a plain ResNet's weights. "
            "Nothing was loaded"
        )
    return _rename(state, [(r"\.conv2\.0\.weight$", ".conv2.weight")])


@register_converter("triplet_official")
def _triplet_official(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """Misra et al.'s released triplet-attention ResNets (landskape-ai/triplet-attention):
    ``layerX.Y.triplet_attention.{ChannelGateH, ChannelGateW, SpatialGate}.spatial.{conv, bn}``
    are visattn's branches ``cw`` (the (C, W) plane), ``hc`` (the (H, C) plane) and ``hw``;
    both pool ``[max; mean]`` and lay the planes out the same way."""
    return _rename(
        state,
        [
            (r"\.triplet_attention\.ChannelGateH\.spatial\.", ".attn_standard.cw."),
            (r"\.triplet_attention\.ChannelGateW\.spatial\.", ".attn_standard.hc."),
            (r"\.triplet_attention\.SpatialGate\.spatial\.", ".attn_standard.hw."),
        ],
    )


# --------------------------------------------------------------------------- the tags

_TIMM = "timm (Wightman et al.)"
_RA2 = "RandAugment recipe 2 (timm)"
_TIMM_PROOF = (
    "timm's own network with random weights, saved in timm's layout, loaded through the tag "
    "with a local file: outputs equal to timm's (eval, float64)"
)


def _register_timm_tags() -> None:
    timm_common = dict(source="timm", interpolation="bicubic", publisher=_TIMM, proof=_TIMM_PROOF)
    for tag, top1, crop, test_crop, size, test_size, note in (
        ("ra2_in1k", 80.26, 0.875, 0.95, 224, 288, _RA2),
        ("a1_in1k", 80.01, 0.95, 1.0, 224, 288, "ResNet strikes back A1 (Wightman et al., 2021)"),
        ("a2_in1k", 80.10, 0.95, 1.0, 224, 288, "ResNet strikes back A2 (Wightman et al., 2021)"),
        ("a3_in1k", 77.04, 0.95, 0.95, 160, 224, "ResNet strikes back A3 (Wightman et al., 2021)"),
    ):
        register_pretrained(
            PretrainedTag(
                model="se_resnet50",
                tag=tag,
                top1=top1,
                hf_hub_id=f"timm/seresnet50.{tag}",
                input_size=(3, size, size),
                test_input_size=(3, test_size, test_size),
                crop_pct=crop,
                test_crop_pct=test_crop,
                notes=note,
                **timm_common,
            )
        )
    register_pretrained(
        PretrainedTag(
            model="legacy_se_resnet50",
            tag="in1k",
            source="timm_legacy_senet",
            top1=77.64,  # timm's results-imagenet.csv: 77.644
            url=(
                "https://github.com/rwightman/pytorch-image-models/releases/download/"
                "v0.1-cadene/se_resnet50-ce0d4300.pth"
            ),
            publisher="Hu et al., CVPR 2018 (the authors' Caffe model, ported by Cadene and timm)",
            proof=(
                "timm's legacy_seresnet50 with random weights, saved in its layout (layer0, "
                "se_module, last_linear), loaded through the tag with a local file: outputs "
                "equal to timm's (eval, float64)"
            ),
            notes="the Caffe layout: stride on the first 1x1 conv, ceil-mode stem pool",
        )
    )
    for depth, top1 in ((18, 73.02), (34, 76.96)):
        register_pretrained(
            PretrainedTag(
                model=f"sk_resnet{depth}",
                tag="ra_in1k",
                top1=top1,
                hf_hub_id=f"timm/skresnet{depth}.ra_in1k",
                notes="RandAugment recipe (timm)",
                **timm_common,
            )
        )


# the authors' releases, one function each: tags built from their READMEs' tables
_AUTHORS = "released by the authors; download it by hand, then load it with a local file"


def _register_attention_module_tags() -> None:
    """CBAM and BAM, both released in Jongchan/attention-module."""
    register_pretrained(
        PretrainedTag(
            model="cbam_resnet50",
            tag="official_in1k",
            source="cbam_official",
            top1=77.62,
            page="https://drive.google.com/file/d/1mvAVvhLR_2XY_bPYxh-SEz4vDmGzSArO/view",
            publisher="Woo et al., ECCV 2018 (Jongchan/attention-module)",
            proof=(
                "a reference network written in the test from the authors' model code, with "
                "their parameter names and forward, saved as they save it (state_dict under "
                "'state_dict', 'module.' prefix): outputs equal after conversion"
            ),
            notes=(
                f"{_AUTHORS}; needs the authors' spatial gate: use_bn=True; the README's link "
                "since September 2022 (earlier: Dropbox, RESNET50_CBAM_new_name_wrap.pth)"
            ),
        )
    )
    register_pretrained(
        PretrainedTag(
            model="bam_resnet50_official",
            tag="in1k",
            source="bam_official",
            top1=76.86,
            page="https://drive.google.com/file/d/1auVf70gfL0ol40bvaX5rlbpn9cKIxhAL/view",
            publisher="Park et al., BMVC 2018 (Jongchan/attention-module, 90 epochs)",
            proof=(
                "a reference BAM-ResNet-50 written in the test from the authors' model code "
                "(ChannelGate/SpatialGate, 1 + sigmoid(M_c * M_s)), saved nested under "
                "'state_dict' with 'module.': outputs equal after conversion"
            ),
            notes=f"{_AUTHORS}; the official code's BAM: combine='product', layout='official'",
        )
    )


def _register_simam_tags() -> None:
    # ZjjConan/SimAM's README: one Google Drive folder (and a Baidu share) holds every file; the
    # README names no file and publishes no checksum
    for depth, top1 in ((18, 71.31), (34, 74.49), (50, 77.45), (101, 78.65)):
        register_pretrained(
            PretrainedTag(
                model=f"simam_resnet{depth}",
                tag="official_in1k",
                source="simam_official",
                top1=top1,
                page="https://drive.google.com/drive/folders/1rRT0UCPeRLPdTCJvv43hvAnGnS49nIWn",
                publisher="Yang et al., ICML 2021 (ZjjConan/SimAM)",
                proof=(
                    "a reference SimAM-ResNet written in the test from the authors' code (SimAM "
                    "wrapped with conv2 before bn2, lambda 0.1), saved as their training script "
                    "saves it (under 'state_dict' with 'module.'): outputs equal after conversion"
                ),
                notes=(
                    f"{_AUTHORS} (the folder's SimAM-R{depth} file); also on Baidu pan "
                    "(pan.baidu.com/s/1i_imf4Ny4U9SkD5e9nhCJw, extract code 25tp)"
                ),
            )
        )


def _register_fca_tags() -> None:
    # cfzd/FcaNet's README: depth -> (the released file's own top-1, "Evaluation Results"; the
    # paper's, "Reported"); torch.hub downloads the files from the GitHub release v1.0
    for depth, (top1, reported) in {
        34: (75.02, 75.07),
        50: (78.57, 78.52),
        101: (79.63, 79.64),
        152: (80.02, 80.08),
    }.items():
        register_pretrained(
            PretrainedTag(
                model=f"fca_resnet{depth}",
                tag="official_in1k",
                source="fca_official",
                top1=top1,
                url=f"https://github.com/cfzd/FcaNet/releases/download/v1.0/fca{depth}.pth",
                publisher=f"Qin et al., ICCV 2021 (cfzd/FcaNet, torch.hub fca{depth})",
                proof=(
                    "a reference FcaNet written in the test from the authors' code (their DCT "
                    "filters as a buffer, fc.0/fc.2), saved as a plain state_dict: the filters "
                    "match visattn's top16 and outputs are equal after conversion"
                ),
                notes=(
                    f"the authors' evaluation of the released FP32 file; the paper reports "
                    f"{reported:.2f} (FP16 training)"
                ),
            )
        )


def _register_eca_tags() -> None:
    # BangguWu/ECANet's README (May 2020): depth -> (top-1, Google Drive id, Baidu id, code);
    # an earlier README (Oct 2019) gave 77.48 for an earlier ECA-Net50 file
    for depth, (top1, drive, baidu, code) in {
        18: (70.92, "1LMRFRTyzVifGBi2MUpTuYEWW44S8mwyl", "1Bh9J7VY2tYj5oEvEEqvdhQ", "utsy"),
        34: (74.21, "15LV5Jkea3GPzvLP5__H7Gg88oNQUxBDE", "1FFVUBbbJfNNFhyiZZ2P2AQ", "o4dh"),
        50: (77.42, "1670rce333c_lyMWFzBlNZoVUvtxbCF_U", "18LXDcxy8qG66h-7FlWW4SA", "no6u"),
        101: (78.65, "1b5FQ8yDFnZ_UhvWT9txmjI_LjbKkgnvC", "1-ageRP2tku-YSIOqU09WpA", "iov1"),
        152: (78.92, "1_bYnaOg9ptsILC_iC7uQ5Izv-u2rjYG5", "1tPxHAltlcpI93CXUkW9ZOQ", "xaft"),
    }.items():
        kernels = ECA_RELEASED_KERNELS[depth]
        k = "".join(map(str, kernels))
        note = f"{_AUTHORS}; also on Baidu pan (pan.baidu.com/s/{baidu}, extract code {code})"
        if depth == 18:  # the authors' eca_resnet18 ignored --ksize until their fix of 2020-05-06
            note += (
                "; uploaded before the authors' fix that made ResNet-18 use --ksize: if the file "
                "holds kernels 3, 3, 3, 3, the loader names the Conv1d shape mismatches; build "
                "create_model('resnet18', attention=eca_placements((3, 3, 3, 3))) for it"
            )
        register_pretrained(
            PretrainedTag(
                model=f"eca_resnet{depth}",
                tag="official_in1k",
                source="eca_official",
                top1=top1,
                page=f"https://drive.google.com/open?id={drive}",
                publisher=f"Wang et al., CVPR 2020 (BangguWu/ECANet, eca_resnet{depth}_k{k})",
                proof=(
                    "a reference ECA-ResNet written in the test from the authors' code (Conv1d "
                    f"kernels {', '.join(map(str, kernels))}), saved nested under 'state_dict' "
                    "with 'module.': outputs equal after conversion"
                ),
                notes=note,
            )
        )


def _register_triplet_tags() -> None:
    register_pretrained(
        PretrainedTag(
            model="triplet_resnet50",
            tag="official_in1k",
            source="triplet_official",
            top1=77.48,
            page="https://github.com/landskape-ai/triplet-attention#models",
            publisher="Misra et al., WACV 2021 (landskape-ai/triplet-attention)",
            proof=(
                "a reference triplet-attention ResNet written in the test from the authors' code "
                "(ChannelGateH/ChannelGateW/SpatialGate), saved with 'module.': outputs equal "
                "after conversion"
            ),
            notes=_AUTHORS,
        )
    )


def _register_gct_tags() -> None:
    # z-x-yang/GCT's PyTorch/README.md: one Google Drive file, "top-1 acc: 77.2%" (the authors'
    # TensorFlow GCT-ResNet-50 of the paper is another network, not released as a file)
    register_pretrained(
        PretrainedTag(
            model="gct_resnet50_official",
            tag="in1k",
            source="gct_official",
            top1=77.2,
            page="https://drive.google.com/file/d/1y5a56UzBjUWlWwlrU42lxueJY_cBpWLL/view",
            publisher="Yang et al., CVPR 2020 (z-x-yang/GCT, PyTorch GCT-ResNet-50)",
            proof=(
                "a reference GCT-ResNet-50 written in the test from the authors' PyTorch code "
                "(nn.Sequential(GCT, conv) for every conv, stem under 'stem', stride on the "
                "first 1x1), saved nested under 'state_dict' with 'module.': outputs equal "
                "after conversion"
            ),
            notes=f"{_AUTHORS}; their training script evaluates at Resize(256), CenterCrop(224)",
        )
    )


def _register_sk_pytorchinsight_tags() -> None:
    # implus/PytorchInsight's README (Li, SKNet's first author): "SK-ResNet50*", a modified SKNet
    # on the ResNet-50 backbone, 26.15M parameters, 77.5380 top-1 (224 crop of the 256 side)
    register_pretrained(
        PretrainedTag(
            model="sk_resnet50",
            tag="pytorchinsight_in1k",
            source="sk_pytorchinsight",
            top1=77.538,
            page="https://drive.google.com/file/d/1DGYWPeKc7dyJ9i-zPJcPPa2engExPOnJ/view",
            publisher="Li et al. (implus/PytorchInsight, SK-ResNet50*; SKNet: CVPR 2019)",
            proof=(
                "a reference SK-ResNet-50 written in the test from the authors' resnet_sk.py "
                "(conv2/conv2g paths, conv_fc1/bn_fc1/conv_fc2 in the block), saved nested "
                "under 'state_dict' with 'module.': outputs equal after conversion"
            ),
            notes=(
                f"{_AUTHORS}; not the paper's SKNet-50 (a ResNeXt, Caffe only); also on Baidu pan "
                "(pan.baidu.com/s/1Lx5CNUeRQXOSWjzTlcO2HQ, extract code tfwn)"
            ),
        )
    )


_register_timm_tags()
_register_attention_module_tags()
_register_simam_tags()
_register_fca_tags()
_register_eca_tags()
_register_triplet_tags()
_register_gct_tags()
_register_sk_pytorchinsight_tags()
