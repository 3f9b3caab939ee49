"""Multi-scale fusion: ConvNet stages of different strides fused PatchCore's way, on a tiny random ConvNet."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from frozenvit.anomaly import PatchCore, default_blocks, render_sample
from frozenvit.anomaly.features import center_tokens, fuse_blocks, local_aggregate

pytestmark = pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")


@pytest.fixture(scope="module")
def cnn(make_tiny_convnet):
    torch.manual_seed(0)
    return make_tiny_convnet()                       # 64 px; stages of stride 2, 4, 8, 16, 32


@pytest.fixture(scope="module")
def normals():
    return [render_sample("weave", None, 0, i, size=(96, 112))[0] for i in range(10)]


@pytest.fixture(scope="module")
def fitted(cnn, normals):
    return PatchCore(cnn, coreset_ratio=0.25, progress=False).fit(normals)


def test_a_coarser_grid_is_resampled_bilinearly_onto_the_finest():
    coarse = torch.tensor([[0.0, 1.0], [2.0, 3.0]])[None, None]          # (1, 1, 2, 2)
    fine = torch.zeros(1, 1, 4, 4)
    fused = fuse_blocks([coarse, fine])                                   # (1, 2, 4, 4): finest grid, coarse first
    assert fused.shape == (1, 2, 4, 4)
    # half-pixel centres: fine position i sits at (i + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25 coarse cells,
    # clamped to [0, 1]: weights 0, 0.25, 0.75, 1 of the second coarse cell
    assert torch.allclose(fused[0, 0, 0], torch.tensor([0.0, 0.25, 0.75, 1.0]))
    assert torch.allclose(fused[0, 0, :, 0], torch.tensor([0.0, 0.5, 1.5, 2.0]))
    assert torch.equal(fused[0, 1], fine[0, 0])                           # the finest grid passes unchanged


def test_fusion_refuses_grids_of_different_batches():
    with pytest.raises(ValueError, match="different numbers of images"):
        fuse_blocks([torch.zeros(2, 3, 4, 4), torch.zeros(1, 3, 2, 2)])


def test_convnet_default_blocks_are_the_stride_8_and_16_stages():
    assert default_blocks(5, (2, 4, 8, 16, 32)) == (2, 3)                 # EfficientNet, ResNet
    assert default_blocks(4, (4, 8, 16, 32)) == (1, 2)                    # ConvNeXt
    assert default_blocks(3, (4, 32, 64)) == (0, 1)                       # neither: the two before the last
    assert default_blocks(12) == (7, 10)                                  # ViTs keep theirs


@pytest.mark.parametrize("name", ["test_efficientnet", "test_convnext"])
def test_stage_grids_are_measured_not_guessed_from_the_stride(make_tiny_convnet, name):
    """At 70 px a stride-16 stage is 5x5 with EfficientNet's padding and 4x4 with ConvNeXt's patchify stem."""
    bb = make_tiny_convnet(name, img_size=70)
    g = bb.patch_grids(torch.zeros(1, 3, 70, 70), blocks=range(bb.config.depth), check=False)
    assert [bb.config.grid_of(b) for b in g.blocks] == [tuple(g[b].shape[-2:]) for b in g.blocks]
    assert bb.config.grid == tuple(g[bb.config.depth - 1].shape[-2:])


def test_patchcore_fuses_two_convnet_stages_on_the_finer_grid(cnn, fitted, normals):
    assert fitted.blocks_ == (2, 3) and fitted.grid_ == (8, 8)           # stride 8 on 64 px; stride 16 is 4x4
    assert fitted.n_train_patches_ == fitted.n_train_images_ * 64
    assert fitted.bank_.shape[1] == round(0.25 * (32 + 48))               # both stages' channels, pooled
    imgs = [render_sample("weave", "hole", 0, i, size=(96, 112))[0] for i in range(3)]
    out = fitted.predict(imgs)
    assert out.patch_scores.shape == (3, 8, 8)
    assert [m.shape for m in out.maps] == [(96, 112)] * 3
    g = cnn.patch_grids(imgs, blocks=fitted.blocks_)
    per = [local_aggregate(center_tokens(g[b]), 3) for b in fitted.blocks_]   # (3, 32, 8, 8), (3, 48, 4, 4)
    per[1] = F.interpolate(per[1], size=(8, 8), mode="bilinear", align_corners=False)
    f = torch.cat(per, 1).reshape(3, 20, 4, 8, 8).mean(2)                 # 80 -> 20 channels, groups of 4
    q = f.permute(0, 2, 3, 1).reshape(-1, 20).double()
    ref = torch.cdist(q, torch.from_numpy(fitted.bank_).double()).min(1).values.reshape(3, 8, 8)
    assert np.allclose(out.patch_scores, ref.numpy(), atol=1e-4)


def test_a_planted_square_peaks_in_the_fused_convnet_map(cnn, normals):
    det = PatchCore(cnn, coreset_ratio=0.5, progress=False).fit(normals)
    img = render_sample("weave", None, 0, 50, size=(96, 112))[0].copy()
    mask = np.zeros(img.shape[:2], bool)
    mask[10:40, 66:100] = True
    img[mask] = (10, 200, 240)
    m = det.predict([img]).maps[0]
    assert m[mask].mean() > 1.5 * m[~mask].mean()


def test_a_fused_convnet_model_round_trips_through_its_artifact(cnn, fitted, normals, tmp_path):
    fitted.save(tmp_path / "m")
    back = PatchCore.load(tmp_path / "m", backbone=cnn)
    assert back.grid_ == (8, 8) and back.blocks_ == (2, 3) and back.n_train_patches_ == fitted.n_train_patches_
    imgs = normals[:2]
    assert np.array_equal(back.predict(imgs).patch_scores, fitted.predict(imgs).patch_scores)



def test_by_default_a_convnet_leaves_its_edge_ring_out_of_the_image_score_and_a_vit_does_not(cnn, normals,
                                                                                           make_tiny_vit):
    imgs = [render_sample("weave", None, 0, 50 + i, size=(96, 112))[0].copy() for i in range(3)]
    for img in imgs:
        img[:12, :12] = (10, 200, 240)                                  # a square in the corner patch
    det = PatchCore(cnn, coreset_ratio=0.25, image_score="max", progress=False).fit(normals)
    assert det.score_border == "auto" and det.border_rings() == 1
    out = det.predict(imgs)
    core = out.patch_scores[:, 1:-1, 1:-1].reshape(3, -1).max(1)        # (3,) the 6x6 inner patches of 8x8
    assert (out.patch_scores.reshape(3, -1).max(1) > core).all() and np.allclose(out.scores, core)
    torch.manual_seed(0)
    assert PatchCore(make_tiny_vit(), coreset_ratio=0.25, progress=False).fit(normals[:4]).border_rings() == 0


def test_by_default_a_convnet_averages_3x3_neighbourhoods_and_a_vit_none(cnn, normals, make_tiny_vit):
    """aggregation="auto": the paper's 3x3 mean on a ConvNet's fine grid, none on a ViT's 16-px tokens; the features
    are exactly those of the explicit setting."""
    from frozenvit.anomaly import defaults

    torch.manual_seed(0)
    vit = make_tiny_vit()
    imgs = normals[:2]
    for bb, want in ((cnn, 3), (vit, 1)):
        auto = PatchCore(bb, coreset_ratio=0.25, progress=False).fit(normals[:4])
        assert defaults.AGGREGATION == "auto" and auto.aggregation == "auto" and auto.aggregation_size() == want
        explicit = PatchCore(bb, coreset_ratio=0.25, aggregation=want, progress=False).fit(normals[:4])
        other = PatchCore(bb, coreset_ratio=0.25, aggregation=4 - want, progress=False).fit(normals[:4])
        assert np.array_equal(auto.predict(imgs).patch_scores, explicit.predict(imgs).patch_scores)
        assert not np.allclose(auto.predict(imgs).patch_scores, other.predict(imgs).patch_scores)
