"""Tiling for images larger than the model input: the geometry on its own, then PatchCore with `tile`."""
import copy

import numpy as np
import pytest
import torch

from frozenvit.anomaly import PatchCore, render_sample
from frozenvit.anomaly.tiling import Tiling, tile_blocks, tile_size, tile_starts

pytestmark = pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")

SIZES = [((1250, 500), (224, 224)), ((96, 112), (64, 64)), ((64, 64), (64, 64)), ((300, 130), (64, 64)),
         ((65, 1000), (64, 64)), ((30, 20), (64, 64)), ((500, 1250), (64, 96)), ((1277, 500), (224, 224))]


# ---- geometry ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("image,model", SIZES)
@pytest.mark.parametrize("scale", [1.0, 2.0, 0.7])
def test_tiles_cover_every_pixel_and_the_last_row_and_column_are_flush_with_the_border(image, model, scale):
    t = Tiling.plan(image, model, scale=scale, overlap=0.25)
    th, tw = t.tile_size
    assert th <= image[0] and tw <= image[1]
    assert t.tops[0] == 0 and t.lefts[0] == 0
    assert t.tops[-1] + th == image[0] and t.lefts[-1] + tw == image[1]
    assert t.coverage().min() >= 1
    assert list(t.tops) == sorted(set(t.tops)) and list(t.lefts) == sorted(set(t.lefts))


@pytest.mark.parametrize("image,model", SIZES)
def test_neighbouring_tiles_overlap_by_at_least_the_asked_fraction(image, model):
    for overlap in (0.0, 0.25, 0.5):
        t = Tiling.plan(image, model, overlap=overlap)
        for starts, size in ((t.tops, t.tile_size[0]), (t.lefts, t.tile_size[1])):
            steps = np.diff(starts)
            assert (steps <= size * (1 - overlap) + 1).all()          # +1: starts are rounded to whole pixels


@pytest.mark.parametrize("image,model", SIZES)
@pytest.mark.parametrize("scale", [1.0, 2.0, 0.7])
def test_tiles_keep_the_model_aspect_so_nothing_is_stretched(image, model, scale):
    th, tw = tile_size(image, model, scale)
    # equal aspect up to rounding each side to a whole pixel
    assert abs(th / tw - model[0] / model[1]) <= model[0] / model[1] * (0.5 / th + 0.5 / tw) + 1e-12


def test_a_large_image_is_tiled_at_the_model_size_without_resampling():
    assert tile_size((1250, 500), (224, 224), 1.0) == (224, 224)
    assert tile_size((1250, 500), (224, 224), 2.0) == (448, 448)
    t = Tiling.plan((1250, 500), (224, 224))
    assert (len(t.tops), len(t.lefts)) == (8, 3)                        # 1026 / 168 -> 7 steps, 276 / 168 -> 2 steps


def test_a_small_image_is_enlarged_only_as_much_as_the_model_input_needs():
    assert tile_size((30, 200), (64, 64), 1.0) == (30, 30)              # the largest square inside: enlarged 64 / 30
    assert tile_size((64, 64), (64, 64), 1.0) == (64, 64)               # exactly the input: one tile, not resized
    assert tile_size((100, 40), (64, 96), 1.0) == (27, 40)              # a 2:3 window as wide as the image
    assert len(Tiling.plan((64, 64), (64, 64))) == 1


def test_tile_starts_are_evenly_spaced_from_zero_to_the_border():
    assert tile_starts(1250, 224, 0.25) == (0, 147, 293, 440, 586, 733, 879, 1026)   # steps of 146.6 <= 168
    assert tile_starts(224, 224) == (0,) and tile_starts(100, 224) == (0,)
    assert tile_starts(10, 4, 0.0) == (0, 3, 6)


def test_crops_are_the_windows_of_the_image():
    img = np.arange(300 * 130 * 3, dtype=np.int64).reshape(300, 130, 3)
    t = Tiling.plan((300, 130), (64, 64))
    crops = t.crops(img)
    assert len(crops) == len(t) == len(t.windows)
    for c, (top, left) in zip(crops, t.windows):
        assert np.array_equal(c, img[top:top + 64, left:left + 64])


def test_stitching_averages_the_tiles_covering_each_pixel():
    t = Tiling.plan((150, 130), (64, 64), overlap=0.5)
    maps = [np.full(t.tile_size, float(k)) for k in range(len(t))]
    ref_sum, ref_n = np.zeros((150, 130)), np.zeros((150, 130))
    for k, (top, left) in enumerate(t.windows):                         # brute force
        ref_sum[top:top + 64, left:left + 64] += k
        ref_n[top:top + 64, left:left + 64] += 1
    assert np.allclose(t.stitch(iter(maps)), ref_sum / ref_n)
    assert np.allclose(t.stitch(np.ones((len(t), 64, 64))), 1.0)
    with pytest.raises(ValueError, match="stitching needs"):
        t.stitch(maps[:-1])


@pytest.mark.parametrize("image,model,overlap", [((150, 130), (64, 64), 0.5), ((1250, 500), (224, 224), 0.25),
                                                 ((300, 130), (48, 64), 0.25)])
def test_stitch_operators_equal_stitching_the_resampled_tiles(image, model, overlap):
    t = Tiling.plan(image, model, overlap=overlap)
    (th, tw), (h, w) = t.tile_size, (5, 7)
    rng = np.random.default_rng(0)
    ry, rx = rng.random((th, h)), rng.random((tw, w))                  # any linear resampling of a (h, w) map
    p = rng.random((len(t), h, w))                                     # (T, h, w)
    sy, sx = t.stitch_operators(ry, rx)                                # (H0, R*h), (W0, C*w)
    got = sy @ tile_blocks(p, len(t.tops), len(t.lefts)) @ sx.T
    assert np.allclose(got, t.stitch(ry @ pk @ rx.T for pk in p), rtol=1e-5, atol=1e-6)


def test_tile_blocks_put_tile_i_j_at_block_i_j():
    p = np.arange(6 * 2 * 3).reshape(6, 2, 3)                         # 2 x 3 tiles of 2 x 3 tokens, row-major
    b = tile_blocks(p, 2, 3)
    assert b.shape == (4, 9)
    for k in range(6):
        i, j = divmod(k, 3)
        assert (b[2 * i:2 * i + 2, 3 * j:3 * j + 3] == p[k]).all()
    with pytest.raises(ValueError, match="do not fill"):
        tile_blocks(p, 2, 2)


# ---- PatchCore with tiles (tiny random ViT, 64 px input, 16 px tokens) ---------------------------------

SIZE = (160, 256)        # tiles of 64: rows at 0, 48, 96; columns at 0, 48, 96, 144, 192


@pytest.fixture(scope="module")
def normals():
    return [render_sample("weave", None, 0, i, size=SIZE)[0] for i in range(6)]


@pytest.fixture(scope="module")
def tiled(tiny_vit, normals):
    return PatchCore(tiny_vit, coreset_ratio=0.5, tile=1.0, progress=False).fit(normals)


def with_square(img, top, left, size):
    out, mask = img.copy(), np.zeros(img.shape[:2], bool)
    mask[top:top + size, left:left + size] = True
    out[mask] = (10, 200, 240)
    return out, mask


@pytest.mark.parametrize("where", [
    (0, 0),          # the image's top-left corner: the corner of the one tile that covers it
    (140, 236),      # the bottom-right corner: the corner of the last tile only
    (20, 52),        # across the right border of the first tile (x = 64) and the left one of the second (x = 48)
    (54, 100),       # across the top border of the second tile row (y = 48) and the border x = 112
])
def test_a_planted_defect_maps_to_its_own_pixels(tiled, where):
    img, mask = with_square(render_sample("weave", None, 0, 77, size=SIZE)[0], *where, 20)
    m = tiled.predict([img]).maps[0]
    assert m.shape == SIZE
    assert m[mask].mean() > 2 * m[~mask].mean()
    y, x = np.unravel_index(m.argmax(), m.shape)
    top, left = where
    assert top - 8 <= y < top + 20 + 8 and left - 8 <= x < left + 20 + 8     # within half a token of the square


@pytest.mark.parametrize("sigma", [4.0, 0.0])
def test_tiled_maps_equal_stitching_each_tiles_map_then_smoothing_the_image(tiled, sigma):
    from frozenvit.anomaly.anomaly_map import anomaly_maps, original_maps, smooth

    det = copy.copy(tiled).set_params(sigma=sigma)                     # a shallow copy: the fixture keeps its sigma
    img, _ = with_square(render_sample("weave", None, 0, 78, size=SIZE)[0], 54, 100, 20)
    patch, _, where = tiled._score([img])                              # [(T, h, w)], [(Tiling, tile GridMapping)]
    tiling, m = where[0]
    stitched = tiling.stitch(original_maps(t[None], [m], 0.0)[0] for t in patch[0])   # (H0, W0) the reference
    ref = smooth(stitched, sigma * tiling.tile_size[0] / m.model_size[0])
    got = anomaly_maps(patch, where, det.sigma)[0]
    assert got.shape == SIZE and got.dtype == np.float32
    assert np.allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


def test_the_bank_is_built_from_the_tiles_of_every_normal(tiled):
    assert tiled.n_train_patches_ == tiled.n_train_images_ * 15 * 16    # 3 x 5 tiles of 4 x 4 tokens
    assert tiled.bank_.shape[0] == int(np.ceil(0.5 * tiled.n_train_patches_))


def test_an_image_of_the_model_size_is_one_tile_and_scores_as_untiled(tiny_vit, normals):
    crops = [n[:64, :64] for n in normals]
    plain = PatchCore(tiny_vit, coreset_ratio=0.5, progress=False).fit(crops)
    tiled = PatchCore(tiny_vit, coreset_ratio=0.5, tile=1.0, progress=False).fit(crops)
    img = with_square(render_sample("weave", None, 0, 9, size=(64, 64))[0], 20, 20, 12)[0]
    a, b = plain.predict([img]), tiled.predict([img])
    assert np.allclose(a.scores, b.scores, atol=1e-5)
    assert np.allclose(a.maps[0], b.maps[0], atol=1e-4)


@pytest.mark.parametrize("image_score", ["max", "reweighted"])
def test_the_image_score_is_the_untiled_rule_over_the_patches_of_all_tiles(tiny_vit, normals, image_score):
    det = PatchCore(tiny_vit, coreset_ratio=0.5, tile=1.0, image_score=image_score, progress=False).fit(normals)
    img = with_square(render_sample("weave", None, 0, 5, size=SIZE)[0], 100, 150, 20)[0]
    out = det.predict([img])
    p = out.patch_scores[0]                                             # (15, 4, 4)
    assert p.shape == (15, 4, 4)
    if image_score == "max":
        assert np.isclose(out.scores[0], p.max())
    else:                                                               # the tile holding the worst patch, scored alone
        worst = int(p.reshape(15, -1).max(1).argmax())
        top, left = Tiling.plan(SIZE, (64, 64)).windows[worst]
        alone = det.set_params(tile=None).decision_function([img[top:top + 64, left:left + 64]])
        det.set_params(tile=1.0)
        assert np.isclose(out.scores[0], alone[0], atol=1e-6)


@pytest.mark.parametrize("image_score", ["max", "topk"])
def test_score_border_leaves_every_tiles_edge_patches_out_of_the_image_score(tiny_vit, normals, image_score):
    det = PatchCore(tiny_vit, coreset_ratio=0.5, tile=1.0, image_score=image_score, topk_frac=0.05, score_border=1,
                    progress=False).fit(normals)
    img = with_square(render_sample("weave", None, 0, 5, size=SIZE)[0], 0, 0, 14)[0]      # in the first tile's corner
    out = det.predict([img])
    p = out.patch_scores[0]                                             # (15, 4, 4)
    core = p[:, 1:-1, 1:-1]                                             # (15, 2, 2): what counts
    assert p.max() > core.max()
    if image_score == "max":
        assert np.isclose(out.scores[0], core.max())
    else:                                                               # 5% of the 60 inner patches -> the top 3
        assert np.isclose(out.scores[0], np.sort(core.ravel())[-3:].mean())


def test_tiles_go_to_the_backbone_in_batches_of_batch_size(tiny_vit, normals, monkeypatch):
    det = PatchCore(tiny_vit, coreset_ratio=0.5, tile=1.0, batch_size=4, progress=False).fit(normals[:3])
    seen = []
    grids = tiny_vit.patch_grids
    monkeypatch.setattr(tiny_vit, "patch_grids", lambda batch, **kw: seen.append(len(batch)) or grids(batch, **kw))
    det.predict(normals[3:5])                                           # 2 x 15 tiles
    assert max(seen) == 4 and sum(seen) == 30


def test_a_tiled_model_saves_and_loads_its_tiling(tiled, tiny_vit, tmp_path):
    img = with_square(render_sample("weave", None, 0, 8, size=SIZE)[0], 60, 60, 20)[0]
    tiled.save(tmp_path / "m")
    loaded = PatchCore.load(tmp_path / "m", backbone=tiny_vit)
    assert loaded.tile == 1.0 and loaded.tile_overlap == 0.25
    a, b = tiled.predict([img]), loaded.predict([img])
    assert np.array_equal(a.scores, b.scores) and np.array_equal(a.maps[0], b.maps[0])


# ---- tile="auto": windows as large as the image's short side --------------------------------------------

@pytest.mark.parametrize("image,tiles", [((96, 200), (1, 3)), ((400, 100), (5, 1)), ((40, 70), (1, 2)),
                                         ((1250, 500), (3, 1)), ((80, 80), None), ((40, 50), None), ((96, 144), None)])
def test_auto_tiles_cover_the_short_side_whole_and_slide_along_the_long_one(tiny_vit, image, tiles):
    det = PatchCore(tiny_vit, tile="auto")
    det.backbone_ = tiny_vit                                          # the model input (64 x 64), no fit needed
    t = det.tiling_of(image)
    if tiles is None:                                                 # within 1.5x of the input's aspect: whole
        assert t is None
        return
    short = min(image)
    assert t.tile_size == (short, short) and (len(t.tops), len(t.lefts)) == tiles
    assert t.coverage().min() >= 1


def test_auto_tiling_leaves_an_image_near_the_input_aspect_whole_as_untiled(tiny_vit, normals):
    crops = [n[:128, :160] for n in normals]                           # 1.25x the 64 x 64 input's aspect
    auto = PatchCore(tiny_vit, coreset_ratio=0.5, tile="auto", progress=False).fit(crops)
    plain = PatchCore(tiny_vit, coreset_ratio=0.5, tile=None, progress=False).fit(crops)
    img = with_square(render_sample("weave", None, 0, 9, size=(128, 160))[0], 40, 40, 24)[0]
    assert auto.tiling_of(img.shape[:2]) is None
    a, b = auto.predict([img]), plain.predict([img])
    assert np.array_equal(a.scores, b.scores) and np.array_equal(a.maps[0], b.maps[0])


def test_an_auto_tiled_model_saves_and_loads_auto(tiny_vit, normals, tmp_path):
    det = PatchCore(tiny_vit, coreset_ratio=0.5, tile="auto", progress=False).fit(normals[:4])
    det.save(tmp_path / "m")
    loaded = PatchCore.load(tmp_path / "m", backbone=tiny_vit)
    assert loaded.tile == "auto"
    assert np.array_equal(det.decision_function(normals[4:]), loaded.decision_function(normals[4:]))


def test_tile_must_be_none_auto_or_a_positive_scale(tiny_vit, normals):
    from sklearn.utils._param_validation import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="'tile' parameter of PatchCore must be"):
        PatchCore(tiny_vit, tile="big").fit(normals[:2])
