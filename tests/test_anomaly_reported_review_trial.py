"""Defects of `anomaly review` / `anomaly update` found in a new-user trial (train -> deploy -> operator review):
marks tied to the image contents they were given to, the served image checked against what was scored, edited
predictions refused, the port and the labels file checked before any work, predictions without maps scored
again, marks of deleted images cleared."""
import json
import shutil
import socket

import pytest

from frozenvit.backbone.suite.cli import main
from test_anomaly_review import review_workspace  # noqa: F401  (the fitted tiny workspace, a fixture)

pytestmark = pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")


@pytest.fixture
def served(monkeypatch):
    """Stands in for the server: the calls uvicorn.run got."""
    import uvicorn

    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: calls.append(kw))
    return calls


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _images(ws, tmp_path):
    shutil.copytree(ws / "data" / "weave" / "test", tmp_path / "imgs")
    return tmp_path / "imgs"


def _review(ws, images, out, *extra, port=None):      # noqa: F811
    return main(["anomaly", "review", "--model", str(ws / "model"), "--images", str(images), "--out", str(out),
                 "--port", str(port or _free_port()), "--threads", "1", *extra])


def _client(out, images):
    from fastapi.testclient import TestClient

    from frozenvit.anomaly.review import ReviewData, review_app

    return TestClient(review_app(ReviewData.open(out, images)), raise_server_exceptions=False)


def _two_marked_normal(ws, tmp_path):
    """A copy of the workspace's model and images, reviewed, with good/000.png and good/001.png marked normal:
    (images, predictions folder, model)."""
    images, out, model = _images(ws, tmp_path), tmp_path / "rv", tmp_path / "model"
    shutil.copytree(ws / "model", model)
    assert _review(ws, images, out) == 0
    client = _client(out, images)
    client.post("/api/label", json={"image": "good/000.png", "label": "normal"})
    client.post("/api/label", json={"image": "good/001.png", "label": "normal"})
    return images, out, model


def _marks(out):
    return json.loads((out.parent / f"{out.name}.labels.json").read_text())["labels"]


def _provenance(out):
    return json.loads((out / "provenance.json").read_text())["images"]


# ---- 1. a mark belongs to the image contents it was given to ------------------------------------------------------

def test_a_mark_records_the_reviewed_images_sha256_and_is_dropped_when_the_image_changes(review_workspace, tmp_path,
                                                                                        served, capsys):
    ws = review_workspace
    images, out = _images(ws, tmp_path), tmp_path / "rv"
    assert _review(ws, images, out) == 0
    assert _client(out, images).post("/api/label", json={"image": "good/000.png", "label": "normal"}).status_code == 200
    assert _marks(out)["good/000.png"]["sha256"] == _provenance(out)["good/000.png"]["sha256"]
    shutil.copy(images / "hole" / "000.png", images / "good" / "000.png")     # the next part, under the same name
    capsys.readouterr()
    assert _review(ws, images, out) == 0
    printed = capsys.readouterr().out
    assert "dropped the marks of 1 image(s) whose file changed" in printed and "good/000.png" in printed
    assert "good/000.png" not in _marks(out)


def test_update_refuses_an_image_changed_after_it_was_marked_normal(review_workspace, tmp_path, served, capsys,
                                                                    tree_snapshot):
    images, out, model = _two_marked_normal(review_workspace, tmp_path)
    shutil.copy(images / "hole" / "000.png", images / "good" / "000.png")     # changed with no restart of review
    before = tree_snapshot(model)
    capsys.readouterr()
    assert main(["anomaly", "update", "--model", str(model), "--normals", str(tmp_path / "rv.labels.json"),
                 "--threads", "1"]) == 2
    err = capsys.readouterr().err
    assert "changed since they were marked" in err and "good/000.png" in err
    assert f"anomaly review --model {model} --images {images} --out {out}" in err     # a cure that works
    assert tree_snapshot(model) == before


def test_a_labels_file_without_digests_still_reads_as_unverified(review_workspace, tmp_path):
    from frozenvit.anomaly.review import LABELS_KIND, read_labels
    from frozenvit.backbone.suite.artifacts import write_json

    images = _images(review_workspace, tmp_path)
    write_json(tmp_path / "old.labels.json", {"images": str(images.resolve()), "labels": {
        "good/000.png": {"label": "normal", "score": 1.0, "at": "2026-01-01T00:00:00+00:00"}}}, kind=LABELS_KIND)
    with pytest.warns(UserWarning, match="older frozenvit without the image's sha256"):
        files = read_labels(tmp_path / "old.labels.json")
    assert [f.name for f in files] == ["000.png"]


# ---- 2. the served image is the one that was scored --------------------------------------------------------------

def test_an_image_replaced_while_the_page_is_open_is_not_served_beside_the_old_score(review_workspace, tmp_path):
    ws = review_workspace
    images, out = _images(ws, tmp_path), tmp_path / "pred"
    shutil.copytree(ws / "pred", out)
    client = _client(out, images)
    assert client.get("/image/good/000.png").status_code == 200
    shutil.copy(images / "hole" / "000.png", images / "good" / "000.png")
    r = client.get("/image/good/000.png")
    assert r.status_code == 409 and "restart review" in r.json()["detail"]
    state = {i["name"]: i for i in client.get("/api/state").json()["images"]}
    assert state["good/000.png"]["changed"] is True and state["good/001.png"]["changed"] is False
    assert client.post("/api/label", json={"image": "good/000.png", "label": "normal"}).status_code == 409
    assert not (tmp_path / "pred.labels.json").exists()


# ---- 3. edited predictions are refused, never served --------------------------------------------------------------

def test_review_refuses_predictions_whose_scores_csv_was_edited(review_workspace, tmp_path, served, capsys):
    ws = review_workspace
    images, out = _images(ws, tmp_path), tmp_path / "rv"
    assert _review(ws, images, out) == 0
    text = (out / "scores.csv").read_text().splitlines()
    name, score = text[1].split(",")[:2]
    (out / "scores.csv").write_text("\n".join([text[0], text[1].replace(score, "0.000001", 1), *text[2:]]) + "\n")
    served.clear()
    assert _review(ws, images, out) == 2
    err = capsys.readouterr().err
    assert "OutputConflict" in err and "scores.csv" in err and served == []


# ---- 7. the port is checked before any work -----------------------------------------------------------------------

def test_review_on_a_port_in_use_is_a_usage_error_before_scoring(review_workspace, tmp_path, served, capsys):
    ws = review_workspace
    images, out = _images(ws, tmp_path), tmp_path / "rv"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert _review(ws, images, out, port=port) == 2
    err = capsys.readouterr().err
    assert f"port {port} is in use" in err and "--port" in err and "UsageError" in err
    assert not out.exists() and served == []


# ---- 8. a foreign labels file is refused before any work ---------------------------------------------------------

def test_a_foreign_labels_file_is_refused_before_predictions_are_written(review_workspace, tmp_path, served, capsys):
    ws = review_workspace
    images, out = _images(ws, tmp_path), tmp_path / "rv_y"
    (tmp_path / "rv_y.labels.json").write_text('{"my": "stuff"}')
    assert _review(ws, images, out) == 2
    err = capsys.readouterr().err
    assert "OutputConflict" in err and "choose another --out" in err
    assert not out.exists() and (tmp_path / "rv_y.labels.json").read_text() == '{"my": "stuff"}'


# ---- 9. predictions without defect maps are scored again ---------------------------------------------------------

def test_review_scores_again_predictions_written_without_overlays(review_workspace, tmp_path, served, capsys):
    ws = review_workspace
    images, out = _images(ws, tmp_path), tmp_path / "p_noov"
    assert main(["anomaly", "predict", "--model", str(ws / "model"), "--images", str(images), "--out", str(out),
                 "--no-overlays"]) == 0
    capsys.readouterr()
    assert _review(ws, images, out) == 0
    assert "no defect maps" in capsys.readouterr().out
    state = _client(out, images).get("/api/state").json()
    assert all(i["overlay"] and (out / "overlays" / i["overlay"]).is_file() for i in state["images"])


# ---- 10. marks of deleted images -----------------------------------------------------------------------------------

def test_a_mark_of_a_deleted_image_is_dropped_at_start_and_skipped_by_update(review_workspace, tmp_path, served,
                                                                           capsys):
    images, out, model = _two_marked_normal(review_workspace, tmp_path)
    labels = tmp_path / "rv.labels.json"
    kept = labels.read_text()
    (images / "good" / "000.png").unlink()
    with pytest.warns(UserWarning, match="not in .* any more and are skipped"):        # update: skipped, named
        assert main(["anomaly", "update", "--model", str(model), "--normals", str(labels), "--threads", "1"]) == 0
    assert "added 1 images" in capsys.readouterr().out
    labels.write_text(kept)
    assert _review(review_workspace, images, out) == 0                                           # review: dropped, said
    assert "dropped the marks of 1 image(s) no longer in" in capsys.readouterr().out
    assert set(_marks(out)) == {"good/001.png"}


def test_the_app_clears_a_mark_of_an_image_it_no_longer_lists(review_workspace, tmp_path):
    ws = review_workspace
    images, out = _images(ws, tmp_path), tmp_path / "pred"
    shutil.copytree(ws / "pred", out)
    client = _client(out, images)
    from frozenvit.anomaly.review import Labels, labels_path

    Labels(labels_path(out), images).mark("gone/000.png", "normal")      # e.g. written by another server
    assert client.post("/api/label", json={"image": "gone/000.png", "label": None}).status_code == 200
    assert _marks(out) == {}
    assert client.post("/api/label", json={"image": "gone/000.png", "label": "normal"}).status_code == 404


# ---- smaller ------------------------------------------------------------------------------------------------------

def test_the_page_has_no_favicon_404(review_workspace, tmp_path):
    ws = review_workspace
    shutil.copytree(ws / "pred", tmp_path / "pred")
    assert _client(tmp_path / "pred", ws / "data" / "weave" / "test").get("/favicon.ico").status_code < 400
