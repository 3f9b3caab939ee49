"""The review app of `frozenvit anomaly review`: a local web page to inspect defect maps and mark images.

    data = ReviewData.open(predictions_dir, images_dir)      # an `anomaly predict --out` folder of these images
    app = review_app(data)                                   # a FastAPI app; uvicorn.run(app, host="127.0.0.1")

The page (review_static/: plain HTML and JS, no build step) lists the images by score with thumbnails, shows the
selected image and its defect map side by side at full resolution with an opacity control, a threshold slider
with the count and share of images above it and where the calibrated threshold sits, per-defect-type filters for
an MVTec layout, and buttons that mark an image "normal" or "defect".

Marks go into a labels file beside the predictions (`labels_path`: `PRED.labels.json` for the folder PRED), never
into the image folder; each mark re-reads and rewrites it atomically under a lock (`Labels`), so marks made at once
from two tabs (or two servers) are all kept, and they survive a restart. A mark records the sha256 of the image file
it was given to (the one the predictions scored, provenance.json): a mark whose image changed since, or is gone,
is dropped when review opens the predictions again (`ReviewData.dropped` says which), and `anomaly update
--normals` (`read_labels`) refuses an image whose file is no longer the one reviewed.

While the page is open, an image whose file changed on disk since it was scored is not served next to the old
score and map: /image answers 409 and the state marks it "changed" (restart review to score it again).

Files served: the page's own, and only the images and overlays that the predictions list, each resolved inside
its folder (no `..`, absolute paths or symlinks out of it). A bad request gets a 4xx answer, never a traceback.
"""
# no `from __future__ import annotations`: FastAPI reads the endpoints' annotations (Request) at run time

import contextlib
import csv
import hashlib
import json
import mimetypes
import os
import shutil
import socket
import threading
import time
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

from frozenvit.backbone.suite.artifacts import check_output_file, file_kind, write_json
from frozenvit.backbone.suite.errors import OutputConflict, UsageError

LABELS_KIND = "anomaly.labels"
LABELS = ("normal", "defect")
HOST = "127.0.0.1"
PORT = 8765
STATIC = Path(__file__).with_name("review_static")
_STATIC_FILES = {"app.js": "text/javascript", "style.css": "text/css"}
PROVENANCE = "provenance.json"     # as anomaly/cli.py writes it: {"images": {name: {"size", "sha256"}}, ...}
CHANGED = "changed on disk since it was scored; restart review to score it again"
# headless chromium without a sandbox (containers run as root), GPU or any network of its own
CHROMIUM_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run")


def labels_path(predictions: str | Path) -> Path:
    """The labels file of a predictions folder: `PRED.labels.json` beside the folder PRED."""
    p = Path(predictions)
    return p.parent / f"{p.name}.labels.json"


def check_labels_file(path: Path, images: Path, out: str | Path | None = None) -> None:
    """Refuse, before any work, a labels file `review` may not write: one frozenvit did not write (OutputConflict),
    or one holding marks of another image folder (UsageError). The cure names --out: the labels path derives
    from it (`labels_path`)."""
    where = f"the labels file {path}" + (f" of --out {out}" if out is not None else "")
    try:
        check_output_file(path, LABELS_KIND, flag="labels file")   # never a file frozenvit did not write
    except OutputConflict as e:
        if path.is_dir():
            why = "is a folder"
        elif not path.exists():                                     # no permission to write beside --out
            raise OutputConflict(f"{e} (the labels file is OUT.labels.json beside --out: choose another --out)") from e
        elif file_kind(path) != LABELS_KIND:
            why = "exists and was not written by `anomaly review`"
        else:
            why = "changed after frozenvit wrote it (edited by hand?)"
        raise OutputConflict(f"{where} {why}; frozenvit never overwrites what it did not write. The labels file is "
                             f"OUT.labels.json beside --out: choose another --out, or move {path} away") from e
    try:
        have = json.loads(path.read_text()).get("images") if path.is_file() else None
    except (OSError, ValueError, AttributeError):
        have = None
    if have is not None and Path(have) != images.resolve():
        raise UsageError(f"{where} holds marks of the images in {have}, not {images.resolve()}; review those, or "
                         "choose another --out for these images")


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
    """The marks of one predictions folder: {image name: {"label": "normal"|"defect", "score", "sha256", "at"}}
    (sha256: of the image file the mark was given to; absent in files of an older frozenvit), kept in
    `labels_path(predictions)`. Every read and change goes to the file, under a thread lock and an advisory lock
    (flock) on the folder that holds it; a change re-reads the file and rewrites it atomically, so marks from
    two tabs, or two servers over the same predictions, are all kept."""

    def __init__(self, path: Path, images: Path) -> None:
        self._lock = threading.Lock()
        self.path, self.images = path, images.resolve()
        check_labels_file(path, images)

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
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def marks(self) -> dict[str, dict]:
        with self._locked():
            return dict(self._read().get("labels") or {})

    def mark(self, image: str, label: str | None, score: float | None = None, sha256: str | None = None) -> None:
        """Set (or with None, clear) the mark of `image`, given to the image file of digest `sha256`, and rewrite
        the file."""
        if label is not None and label not in LABELS:
            raise ValueError(f"label must be one of {LABELS} or None, got {label!r}")
        with self._locked():
            marks = dict(self._read().get("labels") or {})
            if label is None:
                marks.pop(image, None)
            else:
                marks[image] = {"label": label, "score": score, "sha256": sha256,
                                "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
            write_json(self.path, {"images": str(self.images), "labels": marks}, kind=LABELS_KIND)

    def drop(self, names: set[str]) -> None:
        """Clear the marks of `names` at once (a no-op for names without a mark)."""
        with self._locked():
            marks = dict(self._read().get("labels") or {})
            if any(n in marks for n in names):
                kept = {k: v for k, v in marks.items() if k not in names}
                write_json(self.path, {"images": str(self.images), "labels": kept}, kind=LABELS_KIND)


def read_labels(path: str | Path, label: str = "normal", model: str | Path | None = None) -> list[Path]:
    """The image files marked `label` in a labels file (`labels_path`), in name order, each the file that was
    reviewed. UsageError for a path that is not a labels file, and for a marked image whose file changed since it
    was marked (its sha256 is not the recorded one): nothing may be added then, and the cure (for the model
    `model`) is to review it again. A marked image that is gone is skipped with a warning naming it (it cannot be
    added); a mark written by an older frozenvit (no sha256) is used with a warning (unverified)."""
    from frozenvit.backbone.suite.artifacts import sha256_file

    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path} does not exist: --normals takes a labels file written by `anomaly review` "
                         "(PRED.labels.json beside its predictions folder) or a folder of normal images")
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"{path} cannot be read as a labels file ({e})") from e
    if not isinstance(obj, dict) or obj.get("frozenvit") != LABELS_KIND:
        raise UsageError(f"{path} is not a labels file written by `anomaly review`")
    root = Path(obj["images"])
    marks = obj.get("labels") or {}
    names = sorted(k for k, v in marks.items() if isinstance(v, dict) and v.get("label") == label)
    files, gone, changed, unverified = [], [], [], []
    for n in names:
        f = safe_file(root, n)
        want = marks[n].get("sha256")
        if f is None:
            gone.append(n)
        elif not want:
            unverified.append(n)
            files.append(f)
        elif sha256_file(f) != want:
            changed.append(n)
        else:
            files.append(f)
    if changed:
        pred = path.parent / path.name.removesuffix(".labels.json")
        raise UsageError(
            f"{len(changed)} image(s) marked {label} in {path} changed since they were marked (same name, other "
            f"contents): {_names(changed)}; nothing was added, since a mark holds for the image the reviewer saw. "
            f"Review them again: `frozenvit anomaly review --model {model or 'MODEL'} --images {root} --out {pred}` "
            "scores them again and drops their old marks; mark them there, then run update again")
    if gone:
        warnings.warn(f"{len(gone)} image(s) marked {label} in {path} are not in {root} any more and are skipped "
                      f"(they cannot be added): {_names(gone)}", stacklevel=2)
    if unverified:
        warnings.warn(f"{len(unverified)} mark(s) in {path} were written by an older frozenvit without the image's "
                      f"sha256, so they cannot be checked to be of the images as they are now: {_names(unverified)}; "
                      "they are used as they are (review them again to record it)", stacklevel=2)
    return files


def _names(names: list[str], shown: int = 5) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


@dataclass
class ReviewData:
    """What the page shows: the rows of a predictions folder (image, score, overlay), the threshold they were
    decided at (None: uncalibrated), the images' folder and the labels; `digests`: the sha256 of each image file
    as it was scored (provenance.json; empty for predictions without it, whose images are then not checked);
    `dropped`: lines saying which marks `open` dropped (their image changed since it was marked, or is gone)."""
    predictions: Path
    images: Path
    rows: list[dict]
    threshold: float | None
    labels: Labels
    digests: dict[str, str] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    _seen: dict[str, tuple[tuple, str]] = field(default_factory=dict, repr=False)   # name -> (stat key, sha256)

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
        data = cls(predictions, images, rows, None if t == "uncalibrated" else float(t),
                   Labels(labels_path(predictions), images), _scored_digests(predictions))
        data.dropped = data._drop_stale_marks()
        return data

    def _drop_stale_marks(self) -> list[str]:
        """Clear the marks whose image file is not the one marked (its sha256 differs from the recorded one) or
        whose image is no longer among the rows; lines naming them."""
        marks, listed = self.labels.marks(), {r["name"] for r in self.rows}
        gone = sorted(n for n in marks if n not in listed)
        changed = sorted(n for n, m in marks.items() if n in listed and isinstance(m, dict) and m.get("sha256")
                         and self.digests.get(n) and m["sha256"] != self.digests[n])
        self.labels.drop(set(gone) | set(changed))
        lines = []
        if changed:
            lines.append(f"dropped the marks of {len(changed)} image(s) whose file changed since it was marked (same "
                         f"name, other contents): {_names(changed)}; mark them again")
        if gone:
            lines.append(f"dropped the marks of {len(gone)} image(s) no longer in {self.images}: {_names(gone)}")
        return lines

    def current_digest(self, name: str) -> str | None:
        """sha256 of the image file `name` as it is now (None: gone); re-read only when its size, mtime or inode
        changed."""
        f = safe_file(self.images, name)
        if f is None:
            return None
        try:
            st = f.stat()
            key = (st.st_size, st.st_mtime_ns, st.st_ino)
            seen = self._seen.get(name)
            if seen is not None and seen[0] == key:
                return seen[1]
            from frozenvit.backbone.suite.artifacts import sha256_file

            digest = sha256_file(f)
        except OSError:
            return None
        self._seen[name] = (key, digest)
        return digest

    def changed(self, name: str) -> bool:
        """Whether the image file `name` is not the one that was scored (changed on disk, or gone); False when the
        predictions did not record it."""
        want = self.digests.get(name)
        return want is not None and self.current_digest(name) != want

    def state(self) -> dict[str, Any]:
        types = sorted({r["type"] for r in self.rows if r["type"]})
        marks = self.labels.marks()
        return {"images": [{**r, "label": marks.get(r["name"], {}).get("label"), "changed": self.changed(r["name"])}
                           for r in self.rows],
                "threshold": self.threshold, "types": types if "good" in types and len(types) > 1 else [],
                "predictions": str(self.predictions), "labels_file": str(self.labels.path), "changed_note": CHANGED}


def _scored_digests(predictions: Path) -> dict[str, str]:
    """{image name: sha256 of its file as scored} from a predictions folder's provenance.json; {} without one."""
    try:
        listed = json.loads((predictions / PROVENANCE).read_text())["images"]
        return {str(k): str(v["sha256"]) for k, v in listed.items() if isinstance(v, dict) and v.get("sha256")}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def review_app(data: ReviewData):
    """The FastAPI app over `data`: GET / (the page), /static/{app.js,style.css}, /api/state, /image/{name} (409
    when the file changed on disk since it was scored), /overlay/{name}; POST /api/label {"image": name, "label":
    "normal"|"defect"|null} (409 for a changed image; null also clears a mark of an image no longer listed)."""
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response

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

    @app.get("/favicon.ico")
    def favicon() -> Response:                       # no icon, and no 404 in the browser's console
        return Response(status_code=204)

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
        name, label = body["image"], body["label"]
        if name not in by_name:
            if label is None and name in data.labels.marks():        # a mark of an image no longer listed
                data.labels.mark(name, None)
                return {"image": name, "label": None}
            raise HTTPException(404, "no such image in the predictions")
        if label is not None and data.changed(name):               # the mark would go to pixels nobody saw
            raise HTTPException(409, f"{name} {CHANGED}")
        data.labels.mark(name, label, by_name[name]["score"], data.digests.get(name))
        return {"image": name, "label": label}

    def serve(root: Path, name: str, allowed: bool) -> FileResponse:
        path = safe_file(root, name) if allowed else None
        if path is None:
            raise HTTPException(404, "no such file")
        return FileResponse(path)

    @app.get("/image/{name:path}")
    def image(name: str, request: Request) -> Response:
        """The image as it was scored, read and checked in one go: never another file's pixels beside this
        one's score and map (409 when it changed on disk since)."""
        path = safe_file(data.images, name) if name in by_name else None
        try:
            content = path.read_bytes() if path is not None else None
        except OSError:
            content = None
        if content is None:
            raise HTTPException(404, "no such file")
        digest = hashlib.sha256(content).hexdigest()
        want = data.digests.get(name)
        if want is not None and digest != want:
            raise HTTPException(409, f"{name} {CHANGED}")
        etag = f'"{digest}"'
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers={"ETag": etag})
        return Response(content, media_type=mimetypes.guess_type(path.name)[0] or "application/octet-stream",
                        headers={"ETag": etag, "Cache-Control": "no-cache"})

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
