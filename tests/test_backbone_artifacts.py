import json

import pytest

from backbone.artifacts import atomic_dir, read_config, write_json
from backbone.errors import ArtifactError
from backbone.report import Section, write_report


def _write(path, version=1, fail=False):
    with atomic_dir(path) as tmp:
        write_json(tmp / "config.json", {"kind": "thing", "format_version": version})
        (tmp / "data.bin").write_bytes(b"x" * 100)
        if fail:
            raise RuntimeError("crash while writing")


def test_atomic_dir_crash_leaves_the_old_artifact_untouched(tmp_path):
    _write(tmp_path / "a", version=1)
    with pytest.raises(RuntimeError):
        _write(tmp_path / "a", version=2, fail=True)
    assert read_config(tmp_path / "a", "thing", 1)["format_version"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]          # no temporary left behind


def test_atomic_dir_replaces_an_existing_artifact(tmp_path):
    _write(tmp_path / "a", version=1)
    _write(tmp_path / "a", version=2)
    assert read_config(tmp_path / "a", "thing", 2)["format_version"] == 2


def test_read_config_names_version_and_kind_mismatches(tmp_path):
    _write(tmp_path / "a", version=1)
    with pytest.raises(ArtifactError, match="format version 1"):
        read_config(tmp_path / "a", "thing", 2)
    with pytest.raises(ArtifactError, match="expected 'other'"):
        read_config(tmp_path / "a", "other", 1)
    with pytest.raises(ArtifactError, match="missing"):
        read_config(tmp_path / "nothing", "thing", 1)
    (tmp_path / "a" / "config.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="corrupt"):
        read_config(tmp_path / "a", "thing", 1)


def test_report_is_self_contained_html_with_inline_figures(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    sec = Section("S <1>").text("a & b").table([{"x": 1.23456, "y": "z"}]).figure(fig, "cap")
    path = write_report(tmp_path / "r" / "index.html", "t", [sec])
    html = path.read_text()
    assert "data:image/png;base64," in html and "S &lt;1&gt;" in html and "a &amp; b" in html
    assert "src=\"http" not in html and "1.235" in html


def test_artifacts_get_normal_permissions_not_private_temp_ones(tmp_path):
    import os

    _write(tmp_path / "a")
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o777 & ~mask
    assert (tmp_path / "a" / "config.json").stat().st_mode & 0o777 == 0o666 & ~mask
