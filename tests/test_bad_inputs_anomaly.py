"""Bad input to `frozenvit anomaly ...`: exit 2, the named error in one line, and nothing written.

An unreadable image among the images to predict is an error (ImageFormatError naming the file), not
a skip: an inspection run that quietly drops a part would report it neither good nor defective. Every
file's header is read before the output folder is made, so such a run writes nothing.
"""
import json
import shutil

import pytest
import torch

from frozenvit.backbone.suite.cli import main

FIT = "anomaly fit --data {ws}/data/weave --out {ws}/new_model --image-size 64"
NAMED = "--backbone test_vit --weights {ws}/w.safetensors"
FIT_NAMED = f"{FIT} {NAMED}"
PREDICT = "anomaly predict --images {ws}/data/weave/test --out {ws}/pred"
EVALUATE = "anomaly evaluate --data {ws}/data/weave --out {ws}/metrics.json"

CASES = [
    # (id, argv with {ws}, error class)
    ("garbage --weights (.safetensors)", f"{FIT} --backbone test_vit --weights {{ws}}/garbage.safetensors",
     "BackboneUnavailable"),
    ("truncated --weights (.safetensors)", f"{FIT} --backbone test_vit --weights {{ws}}/truncated.safetensors",
     "BackboneUnavailable"),
    ("truncated --weights (.pth)", f"{FIT} --backbone test_vit --weights {{ws}}/truncated.pth", "BackboneUnavailable"),
    ("--weights holding pickled code", f"{FIT} --backbone test_vit --weights {{ws}}/code.pth", "BackboneUnavailable"),
    ("--weights without --backbone", f"{FIT} --weights {{ws}}/w.safetensors", "UsageError"),
    ("--random-weights with --weights", f"{FIT_NAMED} --random-weights", "UsageError"),
    ("--backbone timm does not know", f"{FIT} --backbone vit_does_not_exist", "BackboneUnavailable"),
    ("zero training images", "anomaly fit --data {ws}/empty --out {ws}/new_model " + NAMED, "DatasetError"),
    ("an unreadable training image", "anomaly fit --data {ws}/bad_normals --out {ws}/new_model " + NAMED,
     "ImageFormatError"),
    ("--data folder that does not exist", "anomaly fit --data {ws}/nothing --out {ws}/new_model", "DatasetError"),
    ("--model that is a data folder", f"{PREDICT} --model {{ws}}/data/weave", "ArtifactError"),
    ("--model that is a file", f"{EVALUATE} --model {{ws}}/w.safetensors", "ArtifactError"),
    ("--model whose config.json was edited by hand", f"{EVALUATE} --model {{ws}}/edited", "ArtifactError"),
    ("--coreset-ratio 0", f"{FIT_NAMED} --coreset-ratio 0", "UsageError"),
    ("--coreset-ratio 1.5", f"{FIT_NAMED} --coreset-ratio 1.5", "UsageError"),
    ("--holdout 1.0", f"{FIT_NAMED} --holdout 1.0", "UsageError"),
    ("--target-fpr 0", f"{FIT_NAMED} --target-fpr 0", "UsageError"),
    ("--batch-size 0", f"{FIT_NAMED} --batch-size 0", "UsageError"),
    ("--blocks out of range", f"{FIT_NAMED} --blocks 2,9", "ParameterError"),
    ("--blocks not numbers", f"{FIT_NAMED} --blocks 2,last", "UsageError"),
    ("--reduce-dim 0", f"{FIT_NAMED} --reduce-dim 0", "UsageError"),
    ("--tile 0", f"{FIT_NAMED} --tile 0", "UsageError"),
    ("--score-border -1", f"{FIT_NAMED} --score-border -1", "UsageError"),
    ("--score-border that leaves no patch", f"{FIT_NAMED} --score-border 9", "ParameterError"),
    ("--index that is not a search", f"{FIT_NAMED} --index exhaustive", "UsageError"),
    ("--tile-overlap 1", f"{FIT_NAMED} --tile --tile-overlap 1", "UsageError"),
    ("--augment that is not a symmetry", f"{FIT_NAMED} --augment sideways", "UsageError"),
    ("--threshold nan", f"{FIT_NAMED} --threshold nan", "UsageError"),
    ("predict --threshold inf", "anomaly predict --model {ws}/model --images {ws}/data/weave/test --out {ws}/pred "
                                "--threshold inf", "UsageError"),
    ("--image-size not divisible by a ViT's patch", "anomaly fit --data {ws}/data/weave --out {ws}/new_model "
                                                  "--image-size 70 --backbone test_vit --random-weights", "GridMismatch"),
    ("an unreadable image among test images", "anomaly predict --model {ws}/model --images {ws}/bad_test "
                                              "--out {ws}/pred", "ImageFormatError"),
    ("--images that do not exist", "anomaly predict --model {ws}/model --images {ws}/nothing --out {ws}/pred",
     "UsageError"),
    ("evaluate --data that is not an MVTec category", "anomaly evaluate --model {ws}/model --data {ws}/one",
     "DatasetError"),
    ("evaluate --masks with --data", f"{EVALUATE} --model {{ws}}/model --masks {{ws}}/one", "UsageError"),
    ("audit --folds 1", "anomaly audit --data {ws}/data/weave --folds 1 " + NAMED, "UsageError"),
    ("audit with one image", "anomaly audit --data {ws}/one --image-size 64 " + NAMED, "DatasetError"),
    ("synth --height 8", "anomaly synth --out {ws}/synth --height 8", "UsageError"),
    ("synth --n-train 0", "anomaly synth --out {ws}/synth --n-train 0", "UsageError"),
    ("synth --height 100000", "anomaly synth --out {ws}/synth --height 100000", "UsageError"),
    ("--aggregation 2 (even)", f"{FIT_NAMED} --aggregation 2", "ParameterError"),
    ("--seed -1", f"{FIT_NAMED} --seed -1", "UsageError"),
    ("predict --model that does not exist", f"{PREDICT} --model {{ws}}/nothing", "ArtifactError"),
    ("evaluate --model that does not exist", f"{EVALUATE} --model {{ws}}/nothing", "ArtifactError"),
]


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """A workspace: synthetic data, a local checkpoint, a fitted model and the broken things the cases need."""
    from PIL import Image
    from safetensors.torch import save_file

    from frozenvit.backbone import load_backbone

    ws = tmp_path_factory.mktemp("bad_inputs")
    torch.manual_seed(0)
    sd = {k: v.contiguous() for k, v in load_backbone("test_vit", pretrained=False, img_size=64).model.state_dict().items()}
    save_file(sd, str(ws / "w.safetensors"))
    torch.save(sd, ws / "w.pth")
    (ws / "truncated.safetensors").write_bytes((ws / "w.safetensors").read_bytes()[:5000])
    (ws / "truncated.pth").write_bytes((ws / "w.pth").read_bytes()[:5000])
    (ws / "garbage.safetensors").write_bytes(b"these are not the weights you are looking for")
    torch.save({"pos_embed": torch.zeros(1), "f": shutil.rmtree}, ws / "code.pth")
    assert main(["anomaly", "synth", "--out", str(ws / "data"), "--n-train", "5", "--n-test-good", "1",
                 "--n-test-defect", "1", "--height", "64", "--width", "64"]) == 0
    assert main(FIT_NAMED.format(ws=ws).replace("new_model", "model").split() + ["--threads", "1"]) == 0
    shutil.copytree(ws / "model", ws / "edited")
    cfg = json.loads((ws / "edited" / "config.json").read_text())
    cfg["threshold"] = 0.0                                         # "fewer false negatives, surely"
    (ws / "edited" / "config.json").write_text(json.dumps(cfg))
    (ws / "empty").mkdir()
    (ws / "one").mkdir()
    Image.new("RGB", (64, 64), (90, 80, 70)).save(ws / "one" / "a.png")
    for name in ("bad_test", "bad_normals"):
        shutil.copytree(ws / "data" / "weave" / "train" / "good", ws / name)
        (ws / name / "002.png").write_bytes(b"\x89PNG\r\n\x1a\n not an image at all")
    return ws


@pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")
@pytest.mark.parametrize("argv,error", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_a_named_error_with_exit_2_and_writes_nothing(tree_snapshot, ws, argv, error, capsys):
    before = tree_snapshot(ws)
    try:
        code = main(argv.format(ws=ws).split())
    except SystemExit as e:                     # argparse's own checks (range, choices, types)
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"error ({error})" in err
    assert "Traceback" not in err
    assert tree_snapshot(ws) == before


def test_the_table_has_at_least_fourteen_distinct_bad_inputs():
    assert len({c[0] for c in CASES}) == len(CASES) >= 14


@pytest.mark.parametrize("argv", [
    f"{FIT_NAMED} --out {{ws}}/w.safetensors/model",
    "anomaly predict --model {ws}/model --images {ws}/data/weave/test --out {ws}/w.safetensors/pred",
    "anomaly evaluate --model {ws}/model --data {ws}/data/weave --out {ws}/w.safetensors/m.json",
    "anomaly audit --data {ws}/data/weave --folds 2 --image-size 64 " + NAMED + " --out {ws}/w.safetensors/a.json",
    "anomaly synth --out {ws}/w.safetensors/synth",
], ids=["fit", "predict", "evaluate", "audit", "synth"])
def test_an_out_that_cannot_be_written_is_refused_before_any_work(ws, argv, monkeypatch, capsys):
    import frozenvit.anomaly.synthetic
    import frozenvit.backbone

    def work(*a, **k):
        raise AssertionError("the work started before --out was checked")

    monkeypatch.setattr(frozenvit.backbone, "load_backbone", work)
    monkeypatch.setattr(frozenvit.anomaly.synthetic, "make_synthetic_mvtec", work)
    assert main(argv.format(ws=ws).split()) == 2
    assert "error (OutputConflict)" in capsys.readouterr().err
