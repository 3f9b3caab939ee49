"""The review page in a real browser: Playwright drives the system's chromium (Debian's `chromium` package; no
browser download). Skips, saying why, when playwright or chromium is absent."""
import json
import shutil
import socket
import threading
import time

import pytest

from test_anomaly_review import review_workspace  # noqa: F401  (the fitted tiny workspace, a fixture)

pytestmark = pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def chromium_path() -> str:
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
    pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e '.[review]')")
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("no chromium on PATH (Debian/Ubuntu: apt-get install chromium); the browser test needs one")
    return path


@pytest.fixture
def served(review_workspace):  # noqa: F811
    """The review app of a fresh copy of the predictions on a free localhost port: (url, workspace, labels file)."""
    import uvicorn

    from frozenvit.anomaly.review import ReviewData, review_app

    ws = review_workspace
    shutil.copytree(ws / "pred", ws / "pred_browser", dirs_exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = ReviewData.open(ws / "pred_browser", ws / "data" / "weave" / "test")
    server = uvicorn.Server(uvicorn.Config(review_app(data), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/", ws, data.labels.path
    server.should_exit = True
    thread.join(10)


def test_page_loads_slider_counts_and_a_mark_survives_a_reload(served, tmp_path):
    from playwright.sync_api import sync_playwright

    exe = chromium_path()
    url, ws, labels = served
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
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
