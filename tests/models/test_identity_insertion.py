"""Identity-at-init insertion (placement key ``init: identity``): blocks added to a trained
ResNet leave its logits unchanged, through ``inject`` (torchvision and timm), ``create_model``
with a checkpoint, and the training CLI; with ``init: default`` the logits change, so these
tests can fail.

Randomly initialised networks with random norm statistics stand in for pretrained ones (no
downloads here); eval mode, so the comparison is of the function a trained network computes.
"""

from __future__ import annotations

import copy

import pytest
import timm
import torch
import torch.nn as nn
import torchvision
from helpers.paths import REPO
from helpers.tiers import REPRESENTATIVE_BLOCKS, tiered
from helpers.weights import randomize

import visattn
from visattn.constants import POSITIONS

BLOCKS = visattn.list_blocks()
# every position that inserts a block (``conv`` replaces a trained conv: identity does not apply)
INSERTING = [p for p in POSITIONS if p != "conv"]
LIBRARIES = {
    "torchvision": lambda depth: getattr(torchvision.models, f"resnet{depth}")(weights=None),
    "timm": lambda depth: timm.create_model(f"resnet{depth}", pretrained=False),
}
X64 = (2, 3, 64, 64)


def _every_position(name: str, init: str) -> list[dict]:
    """``name`` at every inserting position of every block, and after every stage."""
    return [{"name": name, "position": p, "init": init} for p in INSERTING]


def _skip_conv_only(name: str) -> None:
    if visattn.block_info(name).replaces_conv:
        pytest.skip(f"{name!r} replaces a conv; identity insertion does not apply to it")


def _relative_change(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


@pytest.fixture(scope="module")
def trained18() -> dict[str, nn.Module]:
    """A stand-in for a pretrained resnet18 of each library (built once; tests copy it)."""
    return {
        lib: randomize(build(18), 0, norms_only=True).eval() for lib, build in LIBRARIES.items()
    }


# torchvision's resnet18 in the fast suite, timm's in the slow one (the same slots, adopted from
# a different block class); blocks beyond the representative ones are heavy
MATRIX = tiered(
    [(lib, name) for lib in LIBRARIES for name in BLOCKS],
    keep=REPRESENTATIVE_BLOCKS,
)


@pytest.mark.parametrize(("library", "name"), MATRIX)
def test_identity_insertion_at_every_position_keeps_the_logits(trained18, library, name):
    _skip_conv_only(name)
    original = trained18[library]
    model = copy.deepcopy(original)
    paths = visattn.inject(model, _every_position(name, "identity"))
    assert len(paths) == 7 * 8 + 4  # 7 block positions x 8 blocks, 4 stages
    x = torch.randn(X64)
    with torch.no_grad():
        expected = original(x)
    out = model(x)
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)
    # the inserted blocks still learn: each block with parameters gets a non-zero gradient
    out.logsumexp(1).sum().backward()
    for p in paths:
        params = list(model.get_submodule(p).parameters())
        if params:
            assert any(q.grad is not None and q.grad.abs().sum() > 0 for q in params), (
                f"{name} at {p}: no gradient"
            )


@pytest.mark.parametrize("name", BLOCKS)
def test_default_insertion_changes_the_logits(trained18, name):
    """The comparison above can fail: the paper's initialisation changes the function (except
    for blocks whose own initialisation already is the identity, e.g. a zero last layer)."""
    _skip_conv_only(name)
    block = visattn.create_block(name, 64).eval()
    x64 = torch.randn(2, 64, 8, 8)
    with torch.no_grad():
        if torch.equal(block(x64), x64):
            pytest.skip(f"{name!r}'s own initialisation is already the identity")
    original = trained18["torchvision"]
    model = copy.deepcopy(original)
    visattn.inject(model, _every_position(name, "default"))
    x = torch.randn(X64)
    with torch.no_grad():
        assert _relative_change(model(x), original(x)) > 1e-3


def _resnet50_placements(name: str, init: str) -> list[dict]:
    """Every inserting position once per stage or so: fewer blocks than resnet18's matrix."""
    out = [
        {"name": name, "position": p, "stages": [s], "init": init}
        for s, p in enumerate(["pre", "inner", "standard", "identity"], start=1)
    ]
    out.append({"name": name, "position": "post", "stages": [4], "blocks": "first", "init": init})
    out.append({"name": name, "position": "stage", "init": init})
    return out


@pytest.mark.parametrize(
    ("library", "name"),
    tiered(
        [(lib, name) for lib in LIBRARIES for name in ["se", "cbam", "bam", "gsop", "gc"]],
    ),
)
def test_identity_insertion_into_a_resnet50_keeps_the_logits(library, name):
    original = randomize(LIBRARIES[library](50), 0, norms_only=True).eval()
    model = copy.deepcopy(original)
    paths = visattn.inject(model, _resnet50_placements(name, "identity"))
    assert len(paths) == 3 + 4 + 6 + 3 + 1 + 4
    x = torch.randn(X64)
    with torch.no_grad():
        expected = original(x)
        torch.testing.assert_close(model(x), expected, rtol=1e-6, atol=1e-6)
        if name == "gc":  # GC's last conv starts at zero: the identity by its own init
            return
        visattn.inject(original, _resnet50_placements(name, "default"))
        assert _relative_change(original(x), expected) > 1e-3


def test_create_model_with_identity_attention_keeps_a_trained_checkpoint_s_logits(tmp_path):
    trained = randomize(
        visattn.create_model("resnet20_cifar", num_classes=10), 0, norms_only=True
    ).eval()
    torch.save(trained.state_dict(), tmp_path / "trained.pth")
    attention = [
        {"name": "cbam", "init": "identity"},
        {"name": "bam", "position": "stage", "stages": [1, 2], "init": "identity"},
    ]
    model = visattn.create_model(
        "resnet20_cifar",
        num_classes=10,
        attention=attention,
        checkpoint_path=tmp_path / "trained.pth",
    ).eval()
    assert model.checkpoint_report.new_keys  # the blocks' weights were not in the file
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), trained(x), rtol=1e-6, atol=1e-6)
        default = [{**p, "init": "default"} for p in attention]
        model = visattn.create_model("resnet20_cifar", num_classes=10, attention=default)
        model.load_state_dict(trained.state_dict(), strict=False)
        assert _relative_change(model.eval()(x), trained(x)) > 1e-3


@pytest.mark.parametrize(
    "override",
    [
        ["--model.attention={name: se, init: identity}"],  # as a sweep's `set` passes it
        ["--model.attention.name=eca", "--model.attention.init=identity"],
    ],
)
def test_the_training_cli_takes_the_init_key(override):
    cli = pytest.importorskip("visattn.training.cli")
    built = cli.VisattnCLI(
        args=["--config", str(REPO / "configs/quickstart.yaml"), *override],
        run=False,
        parser_kwargs={"exit_on_error": False},
    )
    net = built.model.net
    assert net.attention_paths
    for path in net.attention_paths:
        host, slot = path.rsplit(".", 1)
        x = torch.randn(2, net.get_submodule(host).slot_channels(slot[len("attn_") :]), 8, 8)
        torch.testing.assert_close(net.get_submodule(path)(x), x, rtol=0, atol=0)
