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


def test_an_image_changed_on_disk_shows_no_score_and_is_not_counted_as_flagged(review_workspace, tmp_path):  # noqa: F811
    """Its score is the old file's: the list and the detail show a dash, and the flagged count leaves it out."""
    exe = chromium_path()
    from PIL import Image
    from playwright.sync_api import sync_playwright

    from frozenvit.anomaly.review import CHROMIUM_ARGS, ReviewData, review_app, running

    ws = review_workspace
    shutil.copytree(ws / "pred", tmp_path / "pred")
    shutil.copytree(ws / "data" / "weave" / "test", tmp_path / "test")
    data = ReviewData.open(tmp_path / "pred", tmp_path / "test")
    name = data.state()["images"][0]["name"]
    with running(review_app(data)) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=list(CHROMIUM_ARGS))
        page = browser.new_page(viewport={"width": 1100, "height": 700})
        page.goto(url)
        page.wait_for_selector(".item")
        n = page.locator(".item").count()
        slider = page.locator("#threshold")
        slider.fill(slider.get_attribute("min"))                 # everything above: all flagged
        assert page.locator("#flagged").inner_text().startswith(f"{n} of {n} flagged")
        path = tmp_path / "test" / name
        Image.open(path).transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(path)     # another picture, same name
        page.evaluate("refresh()")
        row = page.locator(f'.item[data-name="{name}"]')
        row.locator(".badge.changed").wait_for()
        assert row.locator(".score").inner_text() == "\u2014" and "flagged" not in row.get_attribute("class")
        assert page.locator("#flagged").inner_text().startswith(f"{n - 1} of {n} flagged")
        row.click()
        assert page.locator("#detail-score").inner_text() == "score \u2014"
        browser.close()
