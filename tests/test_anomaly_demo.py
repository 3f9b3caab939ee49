"""The demo section runs in quick mode (the default ensemble), or says plainly that a member's backbone is missing."""
import math
import re

import numpy as np

import pytest

from frozenvit.backbone.suite.report import DemoContext


def _table(html):
    """The first HTML table of a section as a list of {header: cell text} rows."""
    head = re.findall(r"<th>(.*?)</th>", html)
    rows = re.findall(r"<tr>((?:<td>.*?</td>)+)</tr>", html)
    return [dict(zip(head, re.findall(r"<td>(.*?)</td>", r))) for r in rows]


@pytest.mark.slow
def test_quick_demo_fits_the_weave_set_and_reports_its_bank_and_false_alarm_bound(tmp_path):
    from frozenvit.anomaly.demo_section import section
    from frozenvit.backbone.errors import BackboneUnavailable

    sec = section(DemoContext(out_dir=tmp_path, threads=1, quick=True))
    html = "\n".join(sec.blocks)
    try:
        from frozenvit.anomaly.ensemble import default_members
        members = default_members()
    except BackboneUnavailable:
        assert "cannot be loaded here" in html and "<table>" not in html
        return
    (row,) = _table(html)                                   # quick mode: the weave category only
    assert row["category"] == "weave"
    # 8 normals: round(0.2 * 8) = 2 held out, so the threshold only bounds false alarms by 1/3
    assert float(row["FA bound"]) == pytest.approx(1 / 3, abs=1e-4)
    # each member's bank: 10% of the 6 training images' patches (of all their tiles) on the finest default grid,
    # channels pooled to a quarter of the fused blocks' width (the stages' own widths for a ConvNet)
    from frozenvit.anomaly import Tiling, default_blocks

    banks = []
    for m in members:
        bb = m.backbone
        blocks = default_blocks(bb.config.depth, bb.config.strides)
        tiles = 1 if m.tile == "auto" else len(Tiling.plan((96, 112), tuple(bb.config.img_size), m.tile))  # 96x112
        n_patches = 6 * tiles * max(math.prod(bb.config.grid_of(b)) for b in blocks)
        grids = bb.patch_grids([np.zeros((32, 32, 3), np.uint8)], blocks=blocks, progress=False)
        width = sum(grids[b].shape[1] for b in blocks)
        banks.append(f"{math.ceil(0.1 * n_patches)}x{width // 4}")
    assert row["banks"] == " + ".join(banks) and members[-1].tile == 2.0    # the ViT member: 2 tiles per image
    assert float(row["image AUROC"]) > 0.5 and 0 <= float(row["AUPRO@0.3"]) <= 1
    screenshot = "anomaly review" in html                 # the review page's screenshot, where chromium is present
    assert html.count("<img") == 1 + screenshot and (tmp_path / "anomaly-synthetic" / "weave" / "train" / "good").is_dir()
