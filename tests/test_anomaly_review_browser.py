"""The review page in a real browser: Playwright drives the system's chromium (Debian's `chromium` package; no
browser download). Skips, saying why, when playwright or chromium is absent."""
import json
import shutil

import pytest

from test_anomaly_review import review_workspace  # noqa: F401  (the fitted tiny workspace, a fixture)

pytestmark = pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")


def chromium_path() -> str:
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
    pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e '.[review]')")
    from frozenvit.anomaly.review import chromium

    path = chromium()
    if path is None:
        pytest.skip("no chromium on PATH (Debian/Ubuntu: apt-get install chromium); the browser test needs one")
    return path


@pytest.fixture
def served(review_workspace):  # noqa: F811
    """The review app of a fresh copy of the predictions on a free localhost port: (url, labels file)."""
    from frozenvit.anomaly.review import ReviewData, review_app, running

    ws = review_workspace
    shutil.copytree(ws / "pred", ws / "pred_browser", dirs_exist_ok=True)
    data = ReviewData.open(ws / "pred_browser", ws / "data" / "weave" / "test")
    with running(review_app(data)) as url:
        yield url, data.labels.path


def test_page_loads_slider_counts_and_a_mark_survives_a_reload(served, tmp_path):
    exe = chromium_path()
    from playwright.sync_api import sync_playwright

    from frozenvit.anomaly.review import CHROMIUM_ARGS

    url, labels = served
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=list(CHROMIUM_ARGS))
        page = browser.new_page(viewport={"width": 1100, "height": 700})
        page.goto(url)
        page.wait_for_selector(".item")
        n = page.locator(".item").count()
        assert n == 7
        slider = page.locator("#threshold")
        slider.fill(slider.get_attribute("min"))                 # everything above: all flagged
        assert page.locator("#flagged").inner_text().startswith(f"{n} of {n} flagged (100.0%)")
        slider.fill(slider.get_attribute("max"))                 # nothing above
        assert page.locator("#flagged").inner_text().startswith(f"0 of {n} flagged")
        page.locator(".item").nth(1).click()
        name = page.locator("#detail-name").inner_text()
        page.locator("#mark-normal").click()
        page.wait_for_function(f"document.querySelector('.item[data-name=\"{name}\"] .badge.normal') !== null")
        page.reload()
        page.wait_for_selector(f'.item[data-name="{name}"] .badge.normal')
        page.screenshot(path=str(tmp_path / "review.png"))
        browser.close()
    assert json.loads(labels.read_text())["labels"][name]["label"] == "normal"
    assert (tmp_path / "review.png").stat().st_size > 0


def test_screenshot_of_the_page_is_a_png(review_workspace):  # noqa: F811
    chromium_path()
    from frozenvit.anomaly.review import ReviewData, screenshot

    png = screenshot(ReviewData.open(review_workspace / "pred", review_workspace / "data" / "weave" / "test"))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
