"""The review app of `frozenvit anomaly review`: a local web page to inspect defect maps and mark images.

    data = ReviewData.open(predictions_dir, images_dir)      # an `anomaly predict --out` folder of these images
    app = review_app(data)                                   # a FastAPI app; uvicorn.run(app, host="127.0.0.1")

The page (review_static/: plain HTML and JS, no build step) lists the images by score with thumbnails, shows the
selected image and its defect map side by side at full resolution with an opacity control, a threshold slider
with the count and share of images above it and where the calibrated threshold sits, per-defect-type filters for
an MVTec layout, and buttons that mark an image "normal" or "defect".

Marks go into a labels file beside the predictions (`labels_path`: `PRED.labels.json` for the folder PRED), never
into the image folder; each mark re-reads and rewrites it atomically under a lock (`Labels`), so marks made at once
from two tabs (or two servers) are all kept, and they survive a restart. `anomaly update --normals` reads the
images marked "normal" from it.

Files served: the page's own, and only the images and overlays that the predictions list, each resolved inside
its folder (no `..`, absolute paths or symlinks out of it). A bad request gets a 4xx answer, never a traceback.
"""
# no `from __future__ import annotations`: FastAPI reads the endpoints' annotations (Request) at run time

import contextlib
import csv
import shutil
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

from frozenvit.backbone.suite.artifacts import check_output_file, write_json
from frozenvit.backbone.suite.errors import UsageError

LABELS_KIND = "anomaly.labels"
LABELS = ("normal", "defect")
HOST = "127.0.0.1"
PORT = 8765
STATIC = Path(__file__).with_name("review_static")
_STATIC_FILES = {"app.js": "text/javascript", "style.css": "text/css"}
# headless chromium without a sandbox (containers run as root), GPU or any network of its own
CHROMIUM_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run")


def labels_path(predictions: str | Path) -> Path:
    """The labels file of a predictions folder: `PRED.labels.json` beside the folder PRED."""
    p = Path(predictions)
    return p.parent / f"{p.name}.labels.json"


def defect_type(name: str) -> str | None:
    """An image's defect type in an MVTec layout (the folder it sits in: `test/crack/003.png` -> crack), else None."""
    parts = PurePosixPath(name).parts
    return parts[-2] if len(parts) >= 2 else None


def safe_file(root: Path, name: str) -> Path | None:
    """`root/name` when it is a file inside `root` after resolving links, else None: a relative POSIX path without
    `..`, backslashes or NUL, whose real path stays under the real `root`."""
    if not name or "\\" in name or "\x00" in name or name.startswith("/"):
        return None
    rel = PurePosixPath(name)
    if rel.is_absolute() or any(part in ("..", "") for part in rel.parts):
        return None
    real_root = root.resolve()
    try:
        real = (real_root / rel).resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    return real if real.is_relative_to(real_root) and real.is_file() else None


class Labels:
    """The marks of one predictions folder: {image name: {"label": "normal"|"defect", "score", "at"}}, kept in
    `labels_path(predictions)`. Every read and change goes to the file, under a thread lock and an advisory lock
    (flock) on the folder that holds it; a change re-reads the file and rewrites it atomically, so marks from
    two tabs, or two servers over the same predictions, are all kept."""

    def __init__(self, path: Path, images: Path) -> None:
        check_output_file(path, LABELS_KIND, flag="labels file")   # never a file frozenvit did not write
        self.path, self.images = path, images.resolve()
        self._lock = threading.Lock()
        with self._locked():
            have = self._read_images()
        if have is not None and have != self.images:
            raise UsageError(f"{path} holds marks of the images in {have}, not {self.images}; review those, or write "
                             "the predictions of these images elsewhere (--out)")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        import os

        with self._lock:
            try:
                import fcntl
            except ImportError:                     # no flock (Windows): one server at a time
                yield
                return
            fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)                        # closing releases the lock

    def _read(self) -> dict:
        import json

        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def _read_images(self) -> Path | None:
        obj = self._read()
        return Path(obj["images"]) if "images" in obj else None

    def marks(self) -> dict[str, dict]:
        with self._locked():
            return dict(self._read().get("labels") or {})

    def mark(self, image: str, label: str | None, score: float | None = None) -> None:
        """Set (or with None, clear) the mark of `image` and rewrite the file."""
        if label is not None and label not in LABELS:
            raise ValueError(f"label must be one of {LABELS} or None, got {label!r}")
        with self._locked():
            marks = dict(self._read().get("labels") or {})
            if label is None:
                marks.pop(image, None)
            else:
                marks[image] = {"label": label, "score": score,
                                "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
            write_json(self.path, {"images": str(self.images), "labels": marks}, kind=LABELS_KIND)


def read_labels(path: str | Path, label: str = "normal") -> list[Path]:
    """The image files marked `label` in a labels file (`labels_path`), in name order; UsageError for a file that
    is not one, or whose images are gone."""
    import json

    path = Path(path)
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"{path} cannot be read as a labels file ({e})") from e
    if not isinstance(obj, dict) or obj.get("frozenvit") != LABELS_KIND:
        raise UsageError(f"{path} is not a labels file written by `anomaly review`")
    root = Path(obj["images"])
    names = sorted(k for k, v in (obj.get("labels") or {}).items() if v.get("label") == label)
    files = [safe_file(root, n) for n in names]
    missing = [n for n, f in zip(names, files) if f is None]
    if missing:
        raise UsageError(f"{len(missing)} image(s) marked in {path} are not in {root} any more: "
                         f"{', '.join(missing[:5])}")
    return files


@dataclass
class ReviewData:
    """What the page shows: the rows of a predictions folder (image, score, overlay), the threshold they were
    decided at (None: uncalibrated), the images' folder and the labels."""
    predictions: Path
    images: Path
    rows: list[dict]
    threshold: float | None
    labels: Labels

    @classmethod
    def open(cls, predictions: str | Path, images: str | Path) -> "ReviewData":
        predictions, images = Path(predictions), Path(images).resolve()
        lp = labels_path(predictions).resolve()
        if lp.is_relative_to(images) or predictions.resolve().is_relative_to(images):
            raise UsageError(f"the predictions and their labels ({lp}) would lie inside the image folder {images}; "
                             "choose --out outside it")
        with open(predictions / "scores.csv", newline="") as f:
            raw = list(csv.DictReader(f))
        rows, thresholds = [], {r["threshold"] for r in raw}
        for r in raw:
            ov = r["overlay"][len("overlays/"):] if r["overlay"].startswith("overlays/") else None
            rows.append({"name": r["image"], "score": float(r["score"]), "type": defect_type(r["image"]),
                         "overlay": ov})
        rows.sort(key=lambda r: -r["score"])
        t = thresholds.pop() if len(thresholds) == 1 else "uncalibrated"
        return cls(predictions, images, rows, None if t == "uncalibrated" else float(t),
                   Labels(labels_path(predictions), images))

    def state(self) -> dict[str, Any]:
        types = sorted({r["type"] for r in self.rows if r["type"]})
        marks = self.labels.marks()
        return {"images": [{**r, "label": marks.get(r["name"], {}).get("label")} for r in self.rows],
                "threshold": self.threshold, "types": types if "good" in types and len(types) > 1 else [],
                "predictions": str(self.predictions), "labels_file": str(self.labels.path)}


def review_app(data: ReviewData):
    """The FastAPI app over `data`: GET / (the page), /static/{app.js,style.css}, /api/state, /image/{name},
    /overlay/{name}; POST /api/label {"image": name, "label": "normal"|"defect"|null}."""
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

    app = FastAPI(title="frozenvit anomaly review", docs_url=None, redoc_url=None, openapi_url=None)
    by_name = {r["name"]: r for r in data.rows}
    overlays = {r["overlay"] for r in data.rows if r["overlay"]}
    overlay_root = data.predictions / "overlays"

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:   # never a traceback page
        return JSONResponse({"detail": "internal error"}, status_code=500)

    @app.get("/", response_class=HTMLResponse)
    def page() -> HTMLResponse:
        return HTMLResponse((STATIC / "index.html").read_text())

    @app.get("/static/{name}")
    def static(name: str) -> FileResponse:
        if name not in _STATIC_FILES:
            raise HTTPException(404, "no such file")
        return FileResponse(STATIC / name, media_type=_STATIC_FILES[name])

    @app.get("/api/state")
    def state() -> dict:
        return data.state()

    @app.post("/api/label")
    async def label(request: Request) -> dict:
        try:
            body = await request.json()
        except ValueError:
            raise HTTPException(400, "the body is not JSON") from None
        valid = isinstance(body, dict) and isinstance(body.get("image"), str) and body.get("label", 0) in (*LABELS, None)
        if not valid:
            raise HTTPException(422, 'expected {"image": name, "label": "normal" | "defect" | null}')
        if body["image"] not in by_name:
            raise HTTPException(404, "no such image in the predictions")
        data.labels.mark(body["image"], body["label"], by_name[body["image"]]["score"])
        return {"image": body["image"], "label": body["label"]}

    def serve(root: Path, name: str, allowed: bool) -> FileResponse:
        path = safe_file(root, name) if allowed else None
        if path is None:
            raise HTTPException(404, "no such file")
        return FileResponse(path)

    @app.get("/image/{name:path}")
    def image(name: str) -> FileResponse:
        return serve(data.images, name, name in by_name)

    @app.get("/overlay/{name:path}")
    def overlay(name: str) -> FileResponse:
        return serve(overlay_root, name, name in overlays)

    return app


@contextlib.contextmanager
def running(app: Any, host: str = HOST) -> Iterator[str]:
    """Serve `app` with uvicorn on a free port of `host` in a background thread; yields its URL, stops on exit."""
    import uvicorn

    with socket.socket() as s:
        s.bind((host, 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}/"
    finally:
        server.should_exit = True
        thread.join(10)


def chromium() -> str | None:
    """The system's chromium (Debian's `chromium` package), or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def screenshot(data: ReviewData, select: int = 0, size: tuple[int, int] = (1280, 760)) -> bytes | None:
    """A PNG of the review page over `data` with its `select`-th image (by score) open, taken by the system's
    chromium through Playwright; None when playwright, uvicorn or chromium is absent. Marks nothing."""
    exe = chromium()
    try:
        import uvicorn  # noqa: F401
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if exe is None:
        return None
    with running(review_app(data)) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=list(CHROMIUM_ARGS))
        try:
            page = browser.new_page(viewport={"width": size[0], "height": size[1]})
            page.goto(url)
            page.wait_for_selector(".item")
            page.locator(".item").nth(select).click()
            page.wait_for_function("['map', 'photo'].every((id) => document.getElementById(id).complete)")
            return page.screenshot()
        finally:
            browser.close()
