"""The labels-free configuration choice: planted defects (anomaly/planted.py) and PatchCoreSearch (anomaly/select.py)."""
import json

import numpy as np
import pytest
from PIL import Image

from frozenvit.backbone.suite.cli import main

# two candidates on the embedded ViT, cheap enough for a test: the CLI's grid is replaced by it
TINY_GRID = (("vit_pooled", ((None, {}),)), ("vit_full", ((None, {"reduce_dim": None}),)))


@pytest.fixture(scope="module")
def weave(tmp_path_factory):
    from frozenvit.anomaly import make_synthetic_mvtec

    root = tmp_path_factory.mktemp("sel")
    return make_synthetic_mvtec(root, "weave", n_train=12, n_test_good=3, n_test_defect=1, size=(96, 96), seed=0)


@pytest.fixture(scope="module")
def embedded():
    from frozenvit.backbone import load_backbone

    return load_backbone()


def test_planted_defects_change_exactly_their_mask_and_are_seeded():
    from frozenvit.anomaly import plant_defects

    image = np.full((60, 80, 3), 200, np.uint8)
    donor = np.full((50, 70, 3), 7, np.uint8)
    first = plant_defects([image, image], [donor], seed=3, kinds=("cutpaste", "texture"))
    again = plant_defects([image, image], [donor], seed=3, kinds=("cutpaste", "texture"))
    assert len(first) == 4                                           # 2 images x (cutpaste, texture)
    for (img, mask), (img2, mask2) in zip(first, again):
        assert mask.dtype == bool and mask.any() and np.array_equal(mask, mask2) and np.array_equal(img, img2)
        assert np.array_equal((img != 200).any(axis=2), mask)        # changed pixels == mask, nothing else
        assert (img[mask] == 7).all()
    assert not np.array_equal(first[0][1], plant_defects([image, image], [donor], seed=4)[0][1])


def test_scar_and_stain_change_the_shade_of_exactly_their_mask():
    """A scar is the donor's texture (uniform 100 here) darker or brighter by a GAIN factor; a stain is the image's
    own pixels (uniform 120) the same; both inside their mask only. A scar is thin: far less wide than long."""
    from frozenvit.anomaly.planted import GAIN, plant_defects

    image, donor = np.full((120, 160, 3), 120, np.uint8), np.full((50, 70, 3), 100, np.uint8)
    factors = {"scar": 100.0, "stain": 120.0}
    for seed in range(6):
        for (img, mask), kind in zip(plant_defects([image], [donor], seed=seed, kinds=("scar", "stain")),
                                     ("scar", "stain")):
            assert mask.any() and np.array_equal((img != 120).any(axis=2), mask), kind
            gain = img[mask].astype(float) / factors[kind]
            assert np.ptp(gain) < 0.02 and (GAIN[0] - 0.01 <= gain.min() <= GAIN[1] + 0.01
                                           or 1 / GAIN[1] - 0.01 <= gain.min() <= 1 / GAIN[0] + 0.01), kind
        ys, xs = np.nonzero(plant_defects([image], [donor], seed=seed, kinds=("scar",))[0][1])
        cov = np.cov(np.c_[ys, xs].T)
        assert np.sqrt(np.linalg.eigvalsh(cov)[0]) < 0.3 * np.sqrt(np.linalg.eigvalsh(cov)[1])


def test_search_plants_the_kinds_it_is_given_and_refuses_an_unknown_one(weave, embedded):
    from frozenvit.anomaly import PatchCore, PatchCoreSearch, read_mvtec
    from frozenvit.backbone.suite.errors import ParameterError

    train = read_mvtec(weave).train
    search = PatchCoreSearch([("a", PatchCore(embedded, progress=False))], refit=False, search_holdout=2,
                             planted_kinds=("stain", "scar")).fit(train)
    assert {"stain_auroc", "scar_auroc"} <= set(search.results_[0]) and "cutpaste_auroc" not in search.results_[0]
    with pytest.raises(ParameterError, match="planted_kinds"):
        PatchCoreSearch([("a", PatchCore(embedded, progress=False))], refit=False, planted_kinds=("dent",)).fit(train)


def test_search_prefers_the_candidate_that_sees_the_whole_image(weave, embedded):
    """A candidate that scores only the 2x2 centre patches of its 14x14 grid misses most planted defects; listed
    first, it would win a tie."""
    from frozenvit.anomaly import PatchCore, PatchCoreSearch, read_mvtec

    blind = PatchCore(embedded, score_border=6, progress=False)
    sees = PatchCore(embedded, score_border=0, progress=False)
    search = PatchCoreSearch([("centre_only", blind), ("whole", sees)], refit=False, search_holdout=4)
    search.fit(read_mvtec(weave).train)
    by = {r["name"]: r["synthetic_auroc"] for r in search.results_}
    assert search.best_params_["name"] == "whole" and by["whole"] > by["centre_only"] + 0.2


def test_the_saved_winner_loads_predicts_alike_and_records_the_ranking(weave, embedded, tmp_path):
    from frozenvit.anomaly import PatchCore, PatchCoreSearch, load_detector, read_mvtec

    ds = read_mvtec(weave)
    cands = [("a", PatchCore(embedded, progress=False)), ("b", PatchCore(embedded, reduce_dim=None, progress=False))]
    search = PatchCoreSearch(cands, search_holdout=4).fit(ds.train)
    search.save(tmp_path / "m")
    test = [s.path for s in ds.test]
    np.testing.assert_allclose(load_detector(tmp_path / "m").predict(test).scores, search.predict(test).scores,
                               rtol=1e-5)
    sel = json.loads((tmp_path / "m" / "config.json").read_text())["selection"]
    assert sel["chosen"] == search.best_params_["name"] and [r["name"] for r in sel["table"]] == \
        [r["name"] for r in search.results_]


def test_defects_are_planted_only_into_normals_the_winner_holds_out(weave, embedded):
    from frozenvit.anomaly import PatchCore, PatchCoreSearch, read_mvtec

    search = PatchCoreSearch([("a", PatchCore(embedded, progress=False))], search_holdout=2).fit(read_mvtec(weave).train)
    assert len(search.holdout_indices_) == 2
    assert set(search.holdout_indices_) <= set(search.best_estimator_.holdout_indices_)


def _fit_select(data, out, *extra):
    assert main(["anomaly", "fit", "--data", str(data), "--out", str(out), "--select", "auto", "--threads", "1",
                 *extra]) == 0
    sel = json.loads((out / "config.json").read_text())["selection"]
    return [(r["name"], r["synthetic_auroc"]) for r in sel["table"]]


def test_fit_select_auto_plants_the_kinds_asked_and_records_them(weave, tmp_path, monkeypatch):
    from frozenvit.anomaly import defaults

    monkeypatch.setattr(defaults, "SEARCH_GRID", TINY_GRID[:1])
    _fit_select(weave, tmp_path / "m", "--planted-kinds", "stain,scar")
    sel = json.loads((tmp_path / "m" / "config.json").read_text())["selection"]
    assert sel["planted_kinds"] == ["stain", "scar"] and "scar_auroc" in sel["table"][0]


def test_fit_select_auto_on_a_small_set_writes_a_model_predict_reads(weave, tmp_path, monkeypatch, capsys):
    from frozenvit.anomaly import defaults

    monkeypatch.setattr(defaults, "SEARCH_GRID", TINY_GRID)
    _fit_select(weave, tmp_path / "m")
    assert "chose vit_" in capsys.readouterr().out
    assert main(["anomaly", "predict", "--model", str(tmp_path / "m"), "--images", str(weave / "test"),
                 "--out", str(tmp_path / "p"), "--no-overlays"]) == 0


def test_select_auto_reads_no_test_image(weave, tmp_path, monkeypatch):
    """Poisoning the test split (noise images, no masks) leaves the ranking unchanged to the last digit."""
    import shutil

    from frozenvit.anomaly import defaults

    monkeypatch.setattr(defaults, "SEARCH_GRID", TINY_GRID)
    before = _fit_select(weave, tmp_path / "m1")
    poisoned = tmp_path / "weave"
    shutil.copytree(weave, poisoned)
    shutil.rmtree(poisoned / "ground_truth")
    rng = np.random.default_rng(0)
    for f in (poisoned / "test").rglob("*.png"):
        Image.fromarray(rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)).save(f)
    assert _fit_select(poisoned, tmp_path / "m2") == before


def test_select_auto_refuses_an_option_that_picks_the_backbone(weave, tmp_path, capsys):
    rc = main(["anomaly", "fit", "--data", str(weave), "--out", str(tmp_path / "m"), "--select", "auto",
               "--backbone", "embedded"])
    assert rc == 2 and "--select auto chooses the backbone" in capsys.readouterr().err


def test_select_auto_refuses_a_method_option_it_would_ignore(weave, tmp_path, capsys):
    rc = main(["anomaly", "fit", "--data", str(weave), "--out", str(tmp_path / "m"), "--select", "auto",
               "--coreset-ratio", "0.05", "--aggregation", "3"])
    err = capsys.readouterr().err
    assert rc == 2 and "--coreset-ratio, --aggregation would be ignored" in err
    assert not (tmp_path / "m").exists()


def test_planted_kinds_without_select_auto_is_refused(weave, tmp_path, capsys):
    assert main(["anomaly", "fit", "--data", str(weave), "--out", str(tmp_path / "m"), "--planted-kinds", "scar"]) == 2
    assert "--planted-kinds" in capsys.readouterr().err and not (tmp_path / "m").exists()
