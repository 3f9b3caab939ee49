"""The demo report reads on a phone and says where it came from: built from small fake sections, no slow work."""
from __future__ import annotations

import datetime
import re
from importlib.metadata import version

import pytest

from frozenvit.backbone.suite.report import Section, html_table, write_report


class _Entry:
    """Stands for an entry point of the `frozenvit.demo` group."""

    def __init__(self, name, make):
        self.name, self._make = name, make

    def load(self):
        return self._make


def _fake_section(ctx):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    sec = Section("a fake section", order=1).text("a sentence").table([{"model": "x", "MASE": 0.5}])
    return sec.figure(fig, "a line").figure(b"\x89PNG\r\n\x1a\n")     # the second: no caption


@pytest.fixture
def report(tmp_path, monkeypatch):
    from frozenvit.backbone.suite import demo

    monkeypatch.setattr(demo, "entry_points", lambda group: [_Entry("fake", _fake_section)])
    path, failed = demo.run_demo(tmp_path / "r", threads=2, only=["fake"])
    assert failed == []
    return path.read_text()


def test_report_declares_a_device_width_viewport(report):
    assert '<meta name=\'viewport\' content=\'width=device-width, initial-scale=1\'>' in report


def test_every_table_sits_in_a_horizontally_scrolling_box(report):
    assert report.count("<table>") == 1
    assert report.count("<div class='scroll'><table>") == report.count("<table>")
    assert re.search(r"\.scroll\{[^}]*overflow-x:auto", report)


def test_images_shrink_to_the_screen(report):
    assert re.search(r"img\{[^}]*max-width:100%", report)


def test_every_image_has_alt_text(report):
    imgs = re.findall(r"<img [^>]*>", report)
    assert len(imgs) == 2
    alts = [re.search(r'alt="([^"]*)"', i) for i in imgs]
    assert all(a and a.group(1).strip() for a in alts), imgs
    assert alts[0].group(1) == "a line" and alts[1].group(1) == "a fake section"   # the caption, else the title


def test_header_names_the_date_the_version_and_the_command(report):
    header = re.search(r"<p class='meta'>(.*?)</p>", report).group(1)
    assert f"frozenvit {version('frozenvit')}" in header
    assert datetime.date.today().isoformat() in header
    assert re.search(r"with: frozenvit demo --out \S+ --threads 2 --only fake$", header), header


def test_header_names_the_commit_only_when_there_is_one(monkeypatch):
    from frozenvit.backbone.suite import demo

    when = datetime.datetime(2026, 12, 7, 9, 30)
    monkeypatch.setattr(demo, "git_commit", lambda: None)
    assert demo.report_header("frozenvit demo", when) == (f"Written 2026-12-07 09:30 by frozenvit "
                                                          f"{version('frozenvit')} with: frozenvit demo")
    monkeypatch.setattr(demo, "git_commit", lambda: "abc1234")
    assert "(git commit abc1234) with:" in demo.report_header("frozenvit demo", when)


def test_alt_text_is_escaped_inside_the_attribute(tmp_path):
    sec = Section("s").figure(b"\x89PNG\r\n\x1a\n", 'a "quoted" <caption>')
    html = write_report(tmp_path / "index.html", "t", [sec]).read_text()
    assert 'alt="a &quot;quoted&quot; &lt;caption&gt;"' in html


def test_a_report_without_a_header_has_no_empty_header_line(tmp_path):
    html = write_report(tmp_path / "index.html", "t", [Section("s").text("x")]).read_text()
    assert "class='meta'" not in html and "width=device-width" in html


def test_an_empty_table_is_not_wrapped():
    assert html_table([]) == "<p><em>(empty)</em></p>"
