"""Attention pictures: panel layout and PNG size, from a network in memory and from a checkpoint."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image as mpimg
import pytest
import torch
from helpers.paths import REPO

import visattn
from visattn.visualize import MAX_COLS, PANEL_PX, attention_panels, visualize_model
from visattn.visualize.command import main, visualize

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(path: Path) -> tuple[int, int]:
    assert path.read_bytes()[:8] == PNG_MAGIC
    h, w = mpimg.imread(path).shape[:2]
    return w, h


def test_spatial_block_model_gets_one_overlay_per_block(tmp_path: Path) -> None:
    # resnet20_cifar: 3 stages x 3 basic blocks -> 9 spatial maps, plus the image and Grad-CAM:
    # 11 panels, 6 columns x 2 rows
    net = visattn.create_model("resnet20_cifar", num_classes=4, attention={"name": "spatial"})
    images = torch.randn(2, 3, 32, 32)
    boxes = torch.tensor([[4.0, 4.0, 12.0, 12.0], [20.0, 8.0, 30.0, 18.0]])
    paths = visualize_model(net, images, tmp_path, boxes=boxes)
    assert [p.name for p in paths] == ["attention_0.png", "attention_1.png"]
    for p in paths:
        assert _png_size(p) == (6 * PANEL_PX, 2 * PANEL_PX)


def test_channel_block_model_gets_one_heat_map_per_stage(tmp_path: Path) -> None:
    # SE maps are (N, C, 1, 1): no overlays, one channel heat map per stage (3) + the image +
    # Grad-CAM; without Grad-CAM one panel fewer
    net = visattn.create_model("resnet20_cifar", num_classes=4, attention={"name": "se"})
    (path,) = visualize_model(net, torch.randn(1, 3, 32, 32), tmp_path)
    assert _png_size(path) == (5 * PANEL_PX, PANEL_PX)
    (path,) = visualize_model(net, torch.randn(1, 3, 32, 32), tmp_path / "b", gradcam=False)
    assert _png_size(path) == (4 * PANEL_PX, PANEL_PX)


def test_panels_split_maps_by_kind() -> None:
    maps = {
        "layer1.0.attn": torch.rand(16, 1, 1),  # channel
        "layer1.1.attn": torch.rand(16, 1, 1),
        "layer2.0.attn": torch.rand(1, 16, 16),  # spatial gate
        "layer3.0.attn": torch.rand(64, 8, 8),  # mixed mask -> channel mean
        "layer3.1.attn": torch.rand(2, 64, 64),  # non-local full weights: not a picture
    }
    spatial, channel = attention_panels(maps, (32, 32))
    assert list(spatial) == ["layer2.0.attn", "layer3.0.attn"]
    assert torch.allclose(spatial["layer3.0.attn"], maps["layer3.0.attn"].mean(0))
    assert list(channel) == ["layer1"] and list(channel["layer1"]) == [
        "layer1.0.attn",
        "layer1.1.attn",
    ]
    assert MAX_COLS >= 2


def test_model_without_attention_gets_grad_cam_and_is_refused_without_it(tmp_path: Path) -> None:
    net = visattn.create_model("resnet20_cifar", num_classes=4)
    (path,) = visualize_model(net, torch.randn(1, 3, 32, 32), tmp_path, labels=[2])
    assert _png_size(path) == (2 * PANEL_PX, PANEL_PX)  # the image and Grad-CAM
    with pytest.raises(ValueError, match="no registered attention block"):
        visualize_model(net, torch.randn(1, 3, 32, 32), tmp_path, gradcam=False)


def test_grad_cam_panel_shows_the_map_of_a_known_network(tmp_path: Path) -> None:
    from matplotlib.image import AxesImage

    from visattn.visualize import plot_attention

    cam = torch.zeros(8, 8)
    cam[2:4, 5:7] = 1.0
    fig = plot_attention(torch.rand(3, 8, 8), {}, cam=cam, cam_title="Grad-CAM layer3 (label)")
    ax = fig.axes[1]
    assert ax.get_title().startswith("Grad-CAM layer3 (label)")
    overlay = [im for im in ax.get_images() if isinstance(im, AxesImage)][-1]
    assert torch.equal(torch.as_tensor(overlay.get_array()), cam)


@pytest.mark.parametrize(("attention", "size"), [("spatial", (6, 2)), ("se", (5, 1))])
def test_visualize_from_a_training_checkpoint(
    tmp_path: Path, attention: str, size: tuple[int, int]
) -> None:
    cli = pytest.importorskip("visattn.training.cli")
    if not (REPO / "configs" / "quickstart.yaml").is_file():
        pytest.skip("configs/quickstart.yaml is missing")
    summary = cli.run(
        [
            "fit",
            "--config",
            str(REPO / "configs" / "quickstart.yaml"),
            "--model.model=resnet20_cifar",
            f'--model.attention={{"name": "{attention}"}}',
            "--trainer.max_epochs=1",
            "--trainer.limit_train_batches=2",
            "--trainer.limit_val_batches=1",
            "--trainer.enable_progress_bar=false",
            "--data.num_train=64",
            "--data.num_val=32",
            "--data.num_test=32",
            "--data.batch_size=32",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    ckpt = summary["best_ckpt"] or summary["last_ckpt"]
    paths = visualize(ckpt, tmp_path / "pics", num_images=3)
    assert [p.name for p in paths] == [f"attention_val{i:05d}.png" for i in range(3)]
    for p in paths:
        assert _png_size(p) == (size[0] * PANEL_PX, size[1] * PANEL_PX)
    # the command line does the same
    assert main(["--ckpt", ckpt, "--out", str(tmp_path / "cli"), "--indices", "5"]) == 0
    assert _png_size(tmp_path / "cli" / "attention_val00005.png") == (
        size[0] * PANEL_PX,
        size[1] * PANEL_PX,
    )
