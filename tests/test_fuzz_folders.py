"""`anomaly predict` on generated folder layouts: nested folders, hidden files, names that collide once flattened or
differ only in case or suffix, look-alikes of frozenvit's temporaries (`.X.tmp-*`, `.X.old-*`), and its --out inside
the folder it reads, run twice. Whatever the layout:

- every file of the user's is byte-identical afterwards;
- every input image (an image suffix, no hidden name on its path, not inside --out) has exactly one row in
  scores.csv and its own overlay file, and nothing else has a row: no output is ever read back as an input.
"""
import csv
import json
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from frozenvit.backbone.commands import IMAGE_SUFFIXES
from frozenvit.backbone.suite.cli import main

FUZZ = settings(max_examples=50, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
OUT = "frozenvit_pred"                                  # no generated name takes it
DIRS = ["a", "A", "b", "a__b", ".hidden", ".ipynb_checkpoints", f".{OUT}.tmp-1a2b3c", f".{OUT}.old-4d5e6f",
        ".a.tmp-00", "x.png"]                           # a folder with an image's name too
STEMS = ["a", "A", "b", "a__b", "x", "x~2", "._a", ".b", ".frozenvit-temp", ".frozenvit"]
SUFFIXES = [".png", ".PNG", ".jpg", ".jpeg", ".txt", ".json", ""]


@pytest.fixture(scope="module")
def model(tmp_path_factory, saved_test_vit):
    """A model fitted once on a few normals with timm's tiny test ViT (random weights saved locally: rebuildable)."""
    tmp = tmp_path_factory.mktemp("fuzz_folders")
    saved_test_vit(tmp, img_size=32)
    normals = tmp / "normals"
    normals.mkdir()
    for i in range(3):
        Image.new("RGB", (24, 20), (40 * i, 90, 120)).save(normals / f"{i}.png")
    assert main(["anomaly", "fit", "--data", str(normals), "--out", str(tmp / "model"), "--backbone", "test_vit",
                 "--weights", str(tmp / "w.safetensors"), "--image-size", "32", "--holdout", "0",
                 "--threshold", "1", "--threads", "1"]) == 0
    return tmp / "model"


entry = st.tuples(st.lists(st.sampled_from(DIRS), max_size=2).map(tuple), st.sampled_from(STEMS),
                  st.sampled_from(SUFFIXES))
layouts = st.tuples(st.lists(entry, min_size=1, max_size=10), st.sampled_from(["root", "nested", "outside"]),
                    st.booleans())


def _write(root, entries):
    """The generated files (an image suffix: a small image; others: bytes), skipping paths that clash."""
    written = set()
    for i, (dirs, stem, suffix) in enumerate(entries):
        rel = "/".join(dirs + (stem + suffix,))
        path = root.joinpath(*dirs, stem + suffix)
        if any(p == rel or p.startswith(rel + "/") or rel.startswith(p + "/") for p in written):
            continue                                    # a file where a folder is (or the reverse)
        path.parent.mkdir(parents=True, exist_ok=True)
        if suffix.lower() in IMAGE_SUFFIXES:
            Image.new("RGB", (20 + i, 18), (10 * i, 200, 30)).save(path, format="PNG" if "png" in suffix.lower()
                                                                   else "JPEG")
        else:                                           # also `.frozenvit.json`: a user's file, not our marker
            path.write_bytes(b"notes " + rel.encode())
        written.add(rel)
    for d in DIRS:                                      # look-alike temporaries of --out: a tag that is not ours
        if d.startswith(f".{OUT}.") and (root / d).is_dir():
            Image.new("RGB", (20, 20)).save(root / d / "inside.png")
            (root / d / ".frozenvit-temp.json").write_text(json.dumps({"target": OUT, "tag": d.split(".")[-1][:3],
                                                                        "token": "not-this-one"}))


def _inputs(root, out):
    """What predict must read: image files whose path has no hidden part, outside --out."""
    found = []
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if (p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not any(s.startswith(".") for s in rel.parts)
                and out not in p.parents):
            found.append(str(rel))
    return sorted(found)


@FUZZ
@given(layout=layouts)
def test_predict_reads_every_input_image_once_and_touches_nothing_of_the_users(tree_snapshot, model, tmp_path_factory,
                                                                               layout):
    entries, where, overlays = layout
    tmp = tmp_path_factory.mktemp("layout")
    root = tmp / "images"
    root.mkdir()
    _write(root, entries)
    (root / "deep").mkdir()
    Image.new("RGB", (22, 22)).save(root / "deep" / "base.png")   # at least one input
    out = {"root": root / OUT, "nested": root / "deep" / OUT, "outside": tmp / OUT}[where]
    want = _inputs(root, out)
    before = tree_snapshot(root)
    argv = ["anomaly", "predict", "--model", str(model), "--images", str(root), "--out", str(out), "--threads", "1"]
    argv += [] if overlays else ["--no-overlays"]
    for run in range(2):                                 # the second run finds the first one's output among its inputs
        assert main(argv) == 0, f"run {run}"
        rows = list(csv.DictReader(open(out / "scores.csv")))
        assert sorted(r["image"] for r in rows) == want
        if overlays:
            files = sorted(p.relative_to(out).as_posix() for p in (out / "overlays").iterdir())
            assert sorted(r["overlay"] for r in rows) == files and len(set(files)) == len(want)
        else:
            assert not (out / "overlays").exists()
    after = tree_snapshot(root)
    inside = out.relative_to(root).as_posix() if root in out.parents else None
    assert {k: v for k, v in after.items() if inside is None or not (k == inside or k.startswith(inside + "/"))} \
        == before
    shutil.rmtree(tmp)
