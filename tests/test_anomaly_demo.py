"""The demo section runs in quick mode, or says plainly that the embedded default is missing."""
from frozenvit.backbone.suite.report import DemoContext


def test_demo_section_quick(tmp_path):
    from frozenvit.anomaly.demo_section import section
    from frozenvit.backbone.errors import BackboneUnavailable

    sec = section(DemoContext(out_dir=tmp_path, threads=1, quick=True))
    html = "\n".join(sec.blocks)
    assert sec.order == 20 and sec.title.startswith("Anomaly")
    try:
        from frozenvit.backbone import load_backbone
        load_backbone()
    except BackboneUnavailable:
        assert "not shipped" in html
        return
    assert "<table>" in html and "<img" in html and "image AUROC" in html
