"""A self-contained HTML report: sections of text, tables and inline PNG figures.

Applications contribute sections to `frozenvit demo` through the entry-point group
`frozenvit.demo`; each entry is a callable `(ctx: DemoContext) -> Section`.
"""
from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .artifacts import atomic_write_text


@dataclass
class Section:
    title: str
    blocks: list[str] = field(default_factory=list)   # HTML fragments, already escaped
    order: int = 50                                     # sections are sorted by this

    def text(self, s: str) -> "Section":
        self.blocks.append(f"<p>{html.escape(s)}</p>")
        return self

    def pre(self, s: str) -> "Section":
        self.blocks.append(f"<pre>{html.escape(s)}</pre>")
        return self

    def html(self, fragment: str) -> "Section":
        """A fragment of HTML as it is (the caller escapes any text in it): e.g. a sentence with a link."""
        self.blocks.append(fragment)
        return self

    def table(self, rows: Sequence[dict[str, Any]], floatfmt: str = "{:.4g}") -> "Section":
        self.blocks.append(html_table(rows, floatfmt))
        return self

    def figure(self, fig_or_png: Any, caption: str = "", alt: str = "") -> "Section":
        """Embed a matplotlib figure, PNG bytes, or a PIL image inline (base64). `alt` (else the caption, else the
        section title) is the image's text for screen readers and for a page whose images do not load."""
        alt = alt or caption or self.title
        self.blocks.append(f'<figure><img src="data:image/png;base64,{png_base64(fig_or_png)}" '
                           f'alt="{html.escape(alt, quote=True)}"/>'
                           f"<figcaption>{html.escape(caption)}</figcaption></figure>")
        return self


@dataclass
class DemoContext:
    out_dir: Path          # where the report goes; sections may write side files under it
    threads: int
    quick: bool = False    # smaller workloads (used by tests)


def png_base64(obj: Any) -> str:
    if isinstance(obj, (bytes, bytearray)):
        data = bytes(obj)
    elif hasattr(obj, "savefig"):
        buf = io.BytesIO()
        obj.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        data = buf.getvalue()
        import matplotlib.pyplot as plt

        plt.close(obj)
    elif hasattr(obj, "save"):  # PIL image
        buf = io.BytesIO()
        obj.save(buf, format="PNG")
        data = buf.getvalue()
    else:
        raise TypeError(f"cannot embed {type(obj).__name__} as PNG")
    return base64.b64encode(data).decode("ascii")


def html_table(rows: Sequence[dict[str, Any]], floatfmt: str = "{:.4g}") -> str:
    if not rows:
        return "<p><em>(empty)</em></p>"
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "&ndash;" if v != v else floatfmt.format(v)     # NaN: nothing to show (a baseline against itself)
        return html.escape(str(v))
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{cell(r.get(c, ''))}</td>" for c in cols) + "</tr>" for r in rows)
    # wrapped so that a table wider than the screen (a phone) scrolls on its own instead of widening the page
    return f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#f3f3f3}pre{background:#f7f7f7;padding:.6em;overflow-x:auto}img{max-width:100%;height:auto}
.scroll{overflow-x:auto;max-width:100%}.meta{color:#555;font-size:.9em}
figure{margin:1em 0}figcaption{color:#555;font-size:.9em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em}"""


def write_report(path: str | Path, title: str, sections: Sequence[Section], header: str = "") -> Path:
    """Write one self-contained HTML file (no external assets) atomically; `header` (plain text: when, which
    version, which command) goes under the title."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'>"
             f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{html.escape(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"]
    if header:
        parts.append(f"<p class='meta'>{html.escape(header)}</p>")
    toc = "".join(f"<li><a href='#s{i}'>{html.escape(s.title)}</a></li>" for i, s in enumerate(sections))
    parts.append(f"<ul>{toc}</ul>")
    for i, s in enumerate(sections):
        parts.append(f"<h2 id='s{i}'>{html.escape(s.title)}</h2>" + "\n".join(s.blocks))
    parts.append("</body></html>")
    path = Path(path)
    atomic_write_text(path, "\n".join(parts))
    return path
