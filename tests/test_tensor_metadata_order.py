"""The same tensors and metadata are the same bytes: safetensors writes its metadata from a hash map in an order
that changes between calls, and `sort_tensor_metadata` (used by every artifact that carries metadata) fixes it."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file
from safetensors import safe_open

from frozenvit.backbone.suite.artifacts import sort_tensor_metadata


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_repeated_saves_are_byte_identical_and_still_load(tmp_path: Path) -> None:
    meta = {f"key{i}": f"value {i} é" for i in range(8)}
    tensors = {"bank": np.arange(12, dtype=np.float32).reshape(3, 4), "scores": np.ones(2, np.float32)}
    digests = set()
    for i in range(10):
        path = tmp_path / f"{i}.safetensors"
        save_file(tensors, str(path), metadata=meta)
        sort_tensor_metadata(path)
        digests.add(_digest(path))
        back = load_file(str(path))
        assert all(np.array_equal(back[k], v) for k, v in tensors.items())
        with safe_open(str(path), "np") as f:
            assert f.metadata() == meta
    assert len(digests) == 1


def test_two_saves_of_one_patchcore_give_the_same_bank_file(tmp_path: Path) -> None:
    from frozenvit.anomaly import PatchCore
    from frozenvit.anomaly.artifact import save_patchcore  # noqa: F401  (the writer under test)

    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (32, 32, 3), dtype=np.uint8) for _ in range(4)]
    det = PatchCore(progress=False, holdout=0.25).fit(images)
    det.save(tmp_path / "a")
    det.save(tmp_path / "b")
    assert _digest(tmp_path / "a" / "bank.safetensors") == _digest(tmp_path / "b" / "bank.safetensors")
