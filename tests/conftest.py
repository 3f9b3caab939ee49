import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Tests run tiny networks: one thread is faster than two contended ones, and deterministic."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} absent (shared data is only for development machines)")
    return SHARED_DATA


def _tiny_vit(name: str = "vit_tiny_patch16_224", img_size: int = 64, **kw):
    """A tiny random ViT: 4 blocks of width 48, built locally (no weights, no network)."""
    from frozenvit.backbone import load_backbone

    kw = {"depth": 4, "embed_dim": 48, "num_heads": 3, **kw}
    return load_backbone(name, pretrained=False, img_size=img_size, **kw)


@pytest.fixture(scope="session")
def make_tiny_vit():
    """Factory of tiny random ViTs: make_tiny_vit(img_size=96, resize="pad", ...)."""
    return _tiny_vit


@pytest.fixture(scope="session")
def tiny_vit():
    """One tiny random ViT (64 px input, 4 x 4 tokens of 16 px), the same weights on every run (seed 0)."""
    import torch

    torch.manual_seed(0)
    return _tiny_vit()


def _tiny_convnet(name: str = "test_efficientnet", img_size: int = 64, **kw):
    """A tiny random timm ConvNet (test_efficientnet: 82 k parameters, stages of stride 2..32), features_only."""
    from frozenvit.backbone import load_backbone

    return load_backbone(name, pretrained=False, img_size=img_size, **kw)


@pytest.fixture(scope="session")
def make_tiny_convnet():
    """Factory of tiny random ConvNets: make_tiny_convnet(img_size=96, resize="pad", ...)."""
    return _tiny_convnet


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under root with its bytes (None for folders): equal snapshots mean nothing was written."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="session")
def tree_snapshot():
    """tree_snapshot(root) -> {relative path: bytes or None}; compare before and after a command."""
    return _tree


def _benchmark(name: str):
    """benchmarks/<name>.py imported as a module (the scripts import their neighbour common.py)."""
    import importlib.util
    import sys

    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
    return module


@pytest.fixture(scope="session")
def load_benchmark():
    """load_benchmark("forecast_m3") -> the benchmark script as a module, to test its parts."""
    return _benchmark


@pytest.fixture(scope="session")
def saved_test_vit():
    """save(folder, img_size) -> the path of timm's tiny `test_vit` random weights (seed 0) saved as safetensors,
    so that a model fitted on them can be rebuilt by name: `--backbone test_vit --weights PATH`."""
    def save(folder: Path, img_size: int = 64) -> Path:
        import torch
        from safetensors.torch import save_file

        from frozenvit.backbone import load_backbone

        torch.manual_seed(0)
        bb = load_backbone("test_vit", pretrained=False, img_size=img_size)
        path = Path(folder) / "w.safetensors"
        save_file({k: v.contiguous() for k, v in bb.model.state_dict().items()}, str(path))
        return path

    return save


@pytest.fixture(scope="session")
def synth_model(saved_test_vit):
    """make(folder) -> folder with data/weave (a small synthetic set) and model/ fitted on it through the CLI
    with the tiny test ViT at 64 px."""
    def make(folder: Path) -> Path:
        from frozenvit.backbone.suite.cli import main

        weights = saved_test_vit(folder)
        assert main(["anomaly", "synth", "--out", str(folder / "data"), "--n-train", "8", "--n-test-good", "3",
                     "--n-test-defect", "1", "--height", "80", "--width", "96"]) == 0
        assert main(["anomaly", "fit", "--data", str(folder / "data" / "weave"), "--out", str(folder / "model"),
                     "--backbone", "test_vit", "--weights", str(weights), "--image-size", "64", "--threads", "1"]) == 0
        return folder

    return make


@pytest.fixture(scope="session")
def poison_after():
    """poison_after(df, cutoff) -> a copy of a long frame whose values after `cutoff` are scaled and shifted
    (y * 5 + 100): what a model saw only up to the cutoff must not change."""
    def poison(df, cutoff):
        out = df.copy()
        after = out["ds"] > cutoff
        out.loc[after, "y"] = out.loc[after, "y"] * 5 + 100
        return out

    return poison
