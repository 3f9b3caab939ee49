"""`anomaly review` (the web app's files, labels and API) and `anomaly update` / `PatchCore.partial_fit`."""
import csv
import json
import threading

import numpy as np
import pytest

from frozenvit.backbone.suite.cli import main

pytestmark = pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")


@pytest.fixture(scope="module")
def review_workspace(tmp_path_factory, synth_model):
    """A fitted tiny model (rebuildable by name), the synthetic weave set and its predictions of test/."""
    tmp = synth_model(tmp_path_factory.mktemp("anomaly_review"))
    assert main(["anomaly", "predict", "--model", str(tmp / "model"), "--images", str(tmp / "data" / "weave" / "test"),
                 "--out", str(tmp / "pred")]) == 0
    return tmp


def _data(ws, pred="pred"):
    from frozenvit.anomaly.review import ReviewData

    return ReviewData.open(ws / pred, ws / "data" / "weave" / "test")


def _client(ws, pred="pred"):
    from fastapi.testclient import TestClient

    from frozenvit.anomaly.review import review_app

    return TestClient(review_app(_data(ws, pred)), raise_server_exceptions=False)


def _fresh_pred(ws, name):
    """A copy of the predictions under a new name, so that its labels file starts empty."""
    import shutil

    shutil.copytree(ws / "pred", ws / name)
    return name


# ---- files served -------------------------------------------------------------------------------

def test_safe_file_refuses_parent_absolute_and_backslash_paths(tmp_path):
    from frozenvit.anomaly.review import safe_file

    (tmp_path / "root").mkdir()
    (tmp_path / "secret.txt").write_text("x")
    for name in ("../secret.txt", "/etc/passwd", str(tmp_path / "secret.txt"), "..\\secret.txt", "a/../../secret.txt",
                 "", "a//b"):
        assert safe_file(tmp_path / "root", name) is None, name


def test_safe_file_refuses_a_symlink_out_of_the_folder(tmp_path):
    from frozenvit.anomaly.review import safe_file

    (tmp_path / "root").mkdir()
    (tmp_path / "secret.png").write_bytes(b"x")
    (tmp_path / "root" / "link.png").symlink_to(tmp_path / "secret.png")
    assert safe_file(tmp_path / "root", "link.png") is None


def test_images_listed_in_the_predictions_are_served(review_workspace):
    r = _client(review_workspace).get("/image/good/000.png")
    assert r.status_code == 200 and r.content == (review_workspace / "data/weave/test/good/000.png").read_bytes()


@pytest.mark.parametrize("url", ["/image/../../model/config.json", "/image/%2e%2e/%2e%2e/model/config.json",
                                 "/image/good%2f..%2f..%2f..%2fmodel%2fconfig.json", "/image/%252e%252e/train",
                                 "/image//etc/passwd", "/image/%2Fetc%2Fpasswd", "/overlay/../scores.csv",
                                 "/overlay/%2e%2e%2fscores.csv", "/static/../review.py", "/static/index.html%00"])
def test_path_traversal_is_refused_with_a_4xx(review_workspace, url):
    r = _client(review_workspace).get(url)
    assert 400 <= r.status_code < 500 and b"Traceback" not in r.content


def test_a_symlinked_image_pointing_out_of_the_folder_is_not_served(review_workspace):
    import shutil

    ws = review_workspace
    images = ws / "linked_images"
    shutil.copytree(ws / "data/weave/test", images)
    (images / "good" / "000.png").unlink()
    (images / "good" / "000.png").symlink_to(ws / "model" / "config.json")
    from fastapi.testclient import TestClient

    from frozenvit.anomaly.review import ReviewData, review_app

    client = TestClient(review_app(ReviewData.open(ws / "pred", images)), raise_server_exceptions=False)
    assert client.get("/image/good/000.png").status_code == 404
    assert client.get("/image/good/001.png").status_code == 200


# ---- state and marks ---------------------------------------------------------------------------

def test_state_lists_images_by_score_with_threshold_and_defect_types(review_workspace):
    state = _client(review_workspace).get("/api/state").json()
    scores = [i["score"] for i in state["images"]]
    rows = list(csv.DictReader(open(review_workspace / "pred" / "scores.csv")))
    assert scores == sorted(scores, reverse=True) and len(scores) == len(rows)
    assert state["threshold"] == pytest.approx(float(rows[0]["threshold"]))
    folders = sorted(p.name for p in (review_workspace / "data/weave/test").iterdir())
    assert state["types"] == folders and "good" in folders


def test_a_mark_is_saved_beside_the_predictions_and_survives_a_restart(review_workspace):
    ws = review_workspace
    name = _fresh_pred(ws, "pred_restart")
    assert _client(ws, name).post("/api/label", json={"image": "good/001.png", "label": "normal"}).status_code == 200
    saved = json.loads((ws / f"{name}.labels.json").read_text())
    assert saved["labels"]["good/001.png"]["label"] == "normal"
    state = _client(ws, name).get("/api/state").json()                  # a new app: the server restarted
    assert {i["name"]: i["label"] for i in state["images"]}["good/001.png"] == "normal"


def test_a_mark_set_to_null_is_cleared(review_workspace):
    ws = review_workspace
    name = _fresh_pred(ws, "pred_clear")
    client = _client(ws, name)
    client.post("/api/label", json={"image": "hole/000.png", "label": "defect"})
    client.post("/api/label", json={"image": "hole/000.png", "label": None})
    assert json.loads((ws / f"{name}.labels.json").read_text())["labels"] == {}


@pytest.mark.parametrize("body", [{"image": "good/000.png", "label": "maybe"}, {"image": "nope.png", "label": "normal"},
                                  {"label": "normal"}, "not json", {"image": ["good/000.png"], "label": "normal"}])
def test_bad_marks_get_a_4xx_and_no_traceback(review_workspace, body):
    client = _client(review_workspace)
    r = (client.post("/api/label", content=body, headers={"Content-Type": "application/json"}) if isinstance(body, str)
         else client.post("/api/label", json=body))
    assert 400 <= r.status_code < 500 and b"Traceback" not in r.content


def test_marks_made_at_once_from_many_clients_are_all_kept(review_workspace):
    ws = review_workspace
    name = _fresh_pred(ws, "pred_concurrent")
    client = _client(ws, name)
    names = [i["name"] for i in client.get("/api/state").json()["images"]]
    barrier = threading.Barrier(len(names))

    def mark(n):
        barrier.wait()
        assert client.post("/api/label", json={"image": n, "label": "normal"}).status_code == 200

    threads = [threading.Thread(target=mark, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(json.loads((ws / f"{name}.labels.json").read_text())["labels"]) == set(names)


def test_a_labels_file_frozenvit_did_not_write_is_refused(review_workspace):
    from frozenvit.backbone.suite.errors import OutputConflict

    ws = review_workspace
    name = _fresh_pred(ws, "pred_foreign")
    (ws / f"{name}.labels.json").write_text('{"mine": 1}')
    with pytest.raises(OutputConflict):
        _data(ws, name)


def test_labels_of_another_image_folder_are_refused(review_workspace):
    from frozenvit.anomaly.review import ReviewData
    from frozenvit.backbone.suite.errors import UsageError

    ws = review_workspace
    name = _fresh_pred(ws, "pred_other")
    _client(ws, name).post("/api/label", json={"image": "good/000.png", "label": "normal"})
    with pytest.raises(UsageError, match="holds marks of the images in"):
        ReviewData.open(ws / name, ws / "data" / "weave" / "train")


def test_review_refuses_an_out_folder_inside_the_images(review_workspace, capsys):
    ws = review_workspace
    images = ws / "data" / "weave" / "test"
    before = sorted(p.name for p in images.rglob("*"))
    assert main(["anomaly", "review", "--model", str(ws / "model"), "--images", str(images),
                 "--out", str(images / "review")]) == 2
    assert "never written into the image folder" in capsys.readouterr().err
    assert sorted(p.name for p in images.rglob("*")) == before


def test_review_predicts_then_serves_on_localhost_and_warns_for_another_host(review_workspace, monkeypatch, capsys):
    import uvicorn

    ws = review_workspace
    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, host, port, **kw: served.append((host, port)))
    argv = ["anomaly", "review", "--model", str(ws / "model"), "--images", str(ws / "data/weave/test"),
            "--out", str(ws / "pred_cli"), "--port", "8999"]
    assert main(argv) == 0 and (ws / "pred_cli" / "scores.csv").is_file()
    assert served[-1] == ("127.0.0.1", 8999) and "warning" not in capsys.readouterr().err
    assert main(argv + ["--host", "0.0.0.0"]) == 0
    assert served[-1] == ("0.0.0.0", 8999) and "warning: --host 0.0.0.0" in capsys.readouterr().err


# ---- partial_fit and update ------------------------------------------------------------------------

@pytest.fixture
def fitted(tiny_vit):
    from frozenvit.anomaly import PatchCore

    return PatchCore(tiny_vit, coreset_ratio=0.5, holdout=0.25, progress=False)


def _weave(tmp_path):
    from frozenvit.anomaly import read_mvtec
    from frozenvit.anomaly.synthetic import make_synthetic_mvtec

    make_synthetic_mvtec(tmp_path, "weave", n_train=8, n_test_good=4, n_test_defect=1, size=(64, 64), seed=0)
    return read_mvtec(tmp_path / "weave")


def test_partial_fit_grows_the_bank_by_the_coreset_of_the_new_images_only(fitted, tmp_path):
    ds = _weave(tmp_path)
    det = fitted.fit(ds.train)
    bank = det.bank_.copy()
    new = [s.path for s in ds.test if s.label == 0][:3]          # 3 images: 1 held out, 2 into the bank
    det.partial_fit(new)
    added = det.updates_[-1]["bank_entries_added"]
    assert np.array_equal(det.bank_[: len(bank)], bank) and len(det.bank_) == len(bank) + added
    assert added == int(np.ceil(0.5 * 2 * 16))                   # ratio x (2 images x 4 x 4 patches)


def test_partial_fit_lowers_the_score_of_an_added_image(fitted, tmp_path):
    ds = _weave(tmp_path)
    det = fitted.fit(ds.train)
    odd = [s.path for s in ds.test if s.label == 1][:1]           # a defect, as a reviewer's "normal", for the effect
    before = det.decision_function(odd)[0]
    assert det.partial_fit(odd).decision_function(odd)[0] < before


def test_partial_fit_recalibrates_on_stored_and_new_held_out_scores(fitted, tmp_path):
    from frozenvit.anomaly.threshold import conformal_threshold

    ds = _weave(tmp_path)
    det = fitted.fit(ds.train)
    stored = det.calibration_scores_.copy()
    det.partial_fit([s.path for s in ds.test if s.label == 0][:4])   # 1 of 4 held out
    u = det.updates_[-1]
    assert len(u["held_out"]) == 1 and len(det.calibration_scores_) == len(stored) + 1
    assert np.array_equal(det.calibration_scores_[: len(stored)], stored)
    assert det.threshold_ == conformal_threshold(det.calibration_scores_, det.target_fpr) == u["threshold_after"]


def test_partial_fit_before_fit_raises_not_fitted(fitted):
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        fitted.partial_fit([np.zeros((64, 64, 3), np.uint8)])


def test_updates_are_saved_with_the_model(fitted, tmp_path):
    from frozenvit.anomaly import PatchCore

    ds = _weave(tmp_path)
    det = fitted.fit(ds.train).partial_fit([ds.test[0].path])
    det.save(tmp_path / "m")
    back = PatchCore.load(tmp_path / "m", backbone=det.backbone_)
    assert back.updates_ == json.loads(json.dumps(det.updates_)) and len(back.bank_) == len(det.bank_)


def test_update_adds_the_images_marked_normal_and_replaces_the_model(review_workspace, capsys):
    import shutil

    ws = review_workspace
    shutil.copytree(ws / "model", ws / "model_upd")
    name = _fresh_pred(ws, "pred_update")
    client = _client(ws, name)
    client.post("/api/label", json={"image": "good/000.png", "label": "normal"})
    client.post("/api/label", json={"image": "hole/000.png", "label": "defect"})
    bank_before = json.loads((ws / "model_upd" / "config.json").read_text())["bank_shape"][0]
    assert main(["anomaly", "update", "--model", str(ws / "model_upd"), "--normals", str(ws / f"{name}.labels.json"),
                 "--threads", "1"]) == 0
    cfg = json.loads((ws / "model_upd" / "config.json").read_text())
    assert [p.rsplit("/", 2)[-2:] for p in cfg["updates"][0]["added_to_bank"]] == [["good", "000.png"]]
    assert cfg["bank_shape"][0] > bank_before and "added 1 images" in capsys.readouterr().out
    assert main(["anomaly", "predict", "--model", str(ws / "model_upd"), "--images", str(ws / "data/weave/test"),
                 "--out", str(ws / "pred_after")]) == 0         # the replaced artifact loads (digests check out)


def test_update_with_a_file_that_is_not_a_labels_file_fails_in_one_line(review_workspace, capsys):
    ws = review_workspace
    argv = ["anomaly", "update", "--model", str(ws / "model"), "--normals", str(ws / "model" / "config.json")]
    assert main(argv) == 2
    assert "not a labels file" in capsys.readouterr().err


def test_review_without_the_review_extra_says_what_to_install(review_workspace, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "uvicorn", None)                  # import uvicorn raises ImportError
    ws = review_workspace
    assert main(["anomaly", "review", "--model", str(ws / "model"), "--images", str(ws / "data/weave/test"),
                 "--out", str(ws / "pred_noextra")]) == 2
    assert "frozenvit[review]" in capsys.readouterr().err and not (ws / "pred_noextra").exists()


def test_review_reuses_predictions_until_the_model_or_the_images_change(review_workspace, monkeypatch):
    import os
    import shutil

    import uvicorn

    ws = review_workspace
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: None)
    shutil.copytree(ws / "model", ws / "model_reuse")
    images = ws / "images_reuse"
    shutil.copytree(ws / "data/weave/test", images)
    argv = ["anomaly", "review", "--model", str(ws / "model_reuse"), "--images", str(images),
            "--out", str(ws / "pred_reuse")]
    scores = ws / "pred_reuse" / "scores.csv"
    assert main(argv) == 0
    first = scores.stat().st_mtime_ns
    assert main(argv) == 0 and scores.stat().st_mtime_ns == first          # reused
    marker = ws / "model_reuse" / ".frozenvit.json"
    os.utime(marker, ns=(first + 10**6, first + 10**6))                   # a newer copy of the same model: reused
    assert main(argv) == 0 and scores.stat().st_mtime_ns == first
    assert main(["anomaly", "update", "--model", str(ws / "model_reuse"), "--normals",
                 str(ws / "data/weave/test/good")]) == 0                   # the model changed: predicted again
    assert main(argv) == 0 and scores.stat().st_mtime_ns > first
    second = scores.stat().st_mtime_ns
    shutil.copy(images / "good" / "000.png", images / "good" / "new.png")  # another image: predicted again
    assert main(argv) == 0 and scores.stat().st_mtime_ns > second
    assert "good/new.png" in scores.read_text()


def test_partial_fit_rescores_the_earlier_held_out_normals_when_given(fitted, tmp_path):
    ds = _weave(tmp_path)
    det = fitted.fit(ds.train)
    held = [ds.train[i] for i in det.holdout_indices_]
    det.partial_fit([s.path for s in ds.test if s.label == 0][:1], calibration_images=held)   # 1 image: none held out
    assert np.allclose(det.calibration_scores_, det.decision_function(held))


def test_marks_from_two_servers_over_the_same_predictions_are_all_kept(review_workspace):
    ws = review_workspace
    name = _fresh_pred(ws, "pred_two_servers")
    a, b = _client(ws, name), _client(ws, name)                          # two apps: two servers
    a.post("/api/label", json={"image": "good/000.png", "label": "normal"})
    b.post("/api/label", json={"image": "hole/000.png", "label": "defect"})
    assert set(json.loads((ws / f"{name}.labels.json").read_text())["labels"]) == {"good/000.png", "hole/000.png"}
    assert {i["name"]: i["label"] for i in a.get("/api/state").json()["images"]}["hole/000.png"] == "defect"


def test_update_adds_normals_to_the_default_ensemble_through_the_cli(tmp_path, capsys):
    s, m = tmp_path / "synth", tmp_path / "model"
    assert main(["anomaly", "synth", "--out", str(s), "--category", "weave", "--n-train", "6", "--n-test-good", "2",
                 "--n-test-defect", "1", "--height", "64", "--width", "64"]) == 0
    assert main(["anomaly", "fit", "--data", str(s / "weave"), "--out", str(m), "--threads", "1"]) == 0
    before = [json.loads((m / "members" / str(i) / "config.json").read_text())["bank_shape"][0] for i in range(2)]
    capsys.readouterr()
    assert main(["anomaly", "update", "--model", str(m), "--normals", str(s / "weave" / "test" / "good"),
                 "--threads", "1"]) == 0
    assert "added 2 images" in capsys.readouterr().out
    cfg = json.loads((m / "config.json").read_text())
    after = [json.loads((m / "members" / str(i) / "config.json").read_text())["bank_shape"][0] for i in range(2)]
    assert cfg["kind"] == "anomaly.ensemble" and len(cfg["updates"]) == 1
    assert all(a > b for a, b in zip(after, before))
    assert main(["anomaly", "predict", "--model", str(m), "--images", str(s / "weave" / "test"),
                 "--out", str(tmp_path / "pred"), "--no-overlays"]) == 0      # the replaced ensemble loads
