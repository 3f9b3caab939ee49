"""The output folder of `forecast backtest` or `forecast predict` holds one run's results: what a run writes is
listed in OUT/run.json.

    folder = RunFolder(out, resume, "backtest")    # refuses to start over a stopped run's checkpoints without --resume
    folder.start(["checkpoints/DLinear"])           # before training: what it will write besides results
    folder.finish(["summary.json", "models/DLinear", ...])        # removes what the earlier run listed and
                                                                   # this one did not write again
A run without `resume` removes what the earlier run listed before it trains (its checkpoints would only
be overwritten in part); a resumed run keeps them. Nothing outside the listing is ever removed: a user's
file in the folder, or added inside a listed model folder, stays, and a listed path that leaves the folder is ignored. A stopped run is one
whose checkpoints hold a training that had epochs left (`checkpoint.unfinished`).

The record says `"complete": false` from the moment a run changes the folder (`start` where it lists other files,
and `writing`, before the first result file) until its last file is written (`finish`): a run stopped while writing
its results (Ctrl-C) leaves a folder that says it is unfinished, whose files may be partly this run's and partly an
earlier one's. (One stopped while training is told by its checkpoints.) `run_state(out)` reads that; the command
says so and points to --resume, which completes it.

    folder.writing([...])                           # before the first result file: unfinished until `finish`
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Iterable

from frozenvit.backbone.suite.artifacts import remove_artifact, remove_outputs, write_json
from frozenvit.backbone.suite.errors import UsageError

log = logging.getLogger("frozenvit.forecasting")
RECORD = "run.json"                     # its kind: forecast.<command>.run
UNFINISHED = ("stopped before all its results were written (training or writing was interrupted); run the same "
              "command with --resume to complete it")


def run_state(out: str | Path) -> str | None:
    """"complete" or "unfinished" for an output folder of `forecast backtest` or `forecast predict` (its run.json's
    `complete`; a record written before that key existed counts as complete), None where there is no run record."""
    try:
        rec = json.loads((Path(out) / RECORD).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or not str(rec.get("frozenvit", "")).startswith("forecast."):
        return None
    return "unfinished" if rec.get("complete") is False else "complete"


class RunFolder:
    """The run record of one output folder (see the module doc) of `forecast <command>`."""

    def __init__(self, out: str | Path, resume: bool = False, command: str = "backtest") -> None:
        self.out, self.resume, self.kind = Path(out), resume, f"forecast.{command}.run"
        try:
            rec = json.loads((self.out / RECORD).read_text())
        except (OSError, ValueError):
            rec = {}
        ok = isinstance(rec, dict) and rec.get("frozenvit") == self.kind and isinstance(rec.get("files"), list)
        self.earlier: list[str] = sorted(f for f in rec["files"] if self._inside(f)) if ok else []
        self.unfinished = ok and rec.get("complete") is False       # an earlier run that stopped before its end
        self._recorded = (self.earlier, not self.unfinished) if ok else None     # what run.json says now
        if not resume and (self.out / "checkpoints").is_dir():
            from .checkpoint import unfinished

            if unfinished(self.out / "checkpoints"):
                raise UsageError(f"--out {self.out} holds a stopped {command}: training checkpoints with epochs left "
                                 f"are in {self.out / 'checkpoints'}; pass --resume to continue it, or start afresh "
                                 "with another --out (or after removing that checkpoints folder)")

    def check_models(self, rewrite: Iterable[str]) -> None:
        """Refuse, before any work, an earlier run whose saved model folders (not its checkpoints, which only
        frozenvit reads) hold a file changed since it was written, which the run would remove or replace, or,
        in a folder `rewrite` names (the run saves that model again, replacing the folder as a whole), a file of
        the user's. A user's file in a folder the run drops stays there."""
        rewrite = set(rewrite)
        from frozenvit.backbone.suite.artifacts import changed_files, foreign_files
        from frozenvit.backbone.suite.errors import OutputConflict

        for rel in self.earlier:
            p = self.out / rel
            if Path(rel).parts[0] == "checkpoints" or not p.is_dir() or p.is_symlink():
                continue
            foreign, edited = foreign_files(p) if rel in rewrite else [], changed_files(p)
            if foreign or edited:
                what = "; ".join(([f"changed since frozenvit wrote them: {', '.join(edited[:5])}"] if edited else [])
                                 + ([f"not written by frozenvit: {', '.join(foreign[:5])}"] if foreign else []))
                raise OutputConflict(f"--out {self.out} holds an earlier run whose {rel} has files {what}; a new run "
                                     "replaces that folder and frozenvit never deletes or overwrites a user's files. "
                                     f"Move them (or {p}) elsewhere, or choose another --out")

    def _inside(self, rel: object) -> bool:
        return isinstance(rel, str) and not Path(rel).is_absolute() and ".." not in Path(rel).parts and rel != RECORD

    def _remove(self, rels: Iterable[str]) -> None:
        for rel in rels:
            p = self.out / rel
            if p.is_dir() and not p.is_symlink():      # a model or checkpoint folder: only the files it lists go
                kept = remove_artifact(p)
                if kept:
                    log.warning("kept %d file(s) in %s that the earlier run did not write: %s", len(kept), p,
                                ", ".join(kept[:3]))
            elif p.exists() or p.is_symlink():
                # a file frozenvit wrote and the user left alone goes, and leaves OUT's marker: a user's file later
                # put under its name is the user's. One the marker does not list, or an edited one, stays.
                if not remove_outputs(self.out, [rel]):
                    log.warning("kept %s: the earlier run listed it, but it is not the file frozenvit wrote there", p)
            else:
                remove_outputs(self.out, [rel])         # already gone: only its entry in the marker goes
            self._prune(Path(rel).parent)

    def _prune(self, rel: Path) -> None:
        """Remove the folders above a removed listed path (models/, checkpoints/: made for the earlier run's
        files) that it left empty, innermost first, up to OUT itself (kept); a folder holding anything stays."""
        for parent in [rel, *rel.parents]:
            d = self.out / parent
            if parent == Path(".") or d.is_symlink() or not d.is_dir():
                continue
            try:
                d.rmdir()                               # only an empty folder: a user's file keeps it
            except OSError:
                return

    def start(self, planned: Iterable[str]) -> None:
        """Before training (the folder claimed): without resume, remove the earlier run's files; then list
        `planned` beside whatever of the earlier run is still there, the run unfinished (written only when that
        changes the listing: a resumed run that stops before writing anything leaves the record as it was)."""
        listed = self.earlier
        if not self.resume:
            self._remove(self.earlier)
            self.earlier = []
        self.earlier = sorted(set(self.earlier) | set(planned))
        if self.earlier != listed:
            self._record(self.earlier, complete=False)

    def writing(self, planned: Iterable[str]) -> None:
        """Before the first result file is written (the folder claimed): record the folder as unfinished, listing
        `planned` beside whatever of the earlier run is still there, until `finish`."""
        self.earlier = sorted(set(self.earlier) | set(planned))
        self._record(self.earlier, complete=False)

    def finish(self, written: Iterable[str]) -> None:
        """After the results are written: remove what was listed and not written again; record `written`, and
        the run as complete."""
        written = sorted(set(written))
        self._remove(f for f in self.earlier if f not in written)
        self._record(written, complete=True)

    def _record(self, files: list[str], complete: bool) -> None:
        if self._recorded == (files, complete):
            return
        self._recorded = (files, complete)
        write_json(self.out / RECORD, {"files": files, "complete": complete,
                                       **({} if complete else {"unfinished": UNFINISHED})}, kind=self.kind)
