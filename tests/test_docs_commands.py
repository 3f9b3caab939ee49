"""Every `frozenvit ...` command line shown in README.md and docs/*.md parses with today's CLI.

Only the parser runs (nothing is fitted or written): an option renamed in the code and not in the docs fails here.
"""
import re
import shlex
from pathlib import Path

import pytest

from frozenvit.backbone.suite.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _commands():
    """(file, line number, argv) of each command line in a fenced block, continuation lines joined."""
    for path in DOCS:
        lines, in_block = path.read_text().splitlines(), False
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.lstrip().startswith("```"):
                in_block = not in_block
            elif in_block and line.lstrip().startswith("frozenvit "):
                start, text = i + 1, line
                while text.rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    text = text.rstrip()[:-1] + " " + lines[i]
                text = text.split("#", 1)[0].split("&&", 1)[0]
                text = re.sub(r"\[([^\]]*)\]", r"\1", text)          # optional parts shown as [--wide]
                yield pytest.param(shlex.split(text)[1:], id=f"{path.name}:{start}")
            i += 1


COMMANDS = list(_commands())


def test_the_docs_show_commands():
    assert len(COMMANDS) >= 10


@pytest.mark.parametrize("argv", COMMANDS)
def test_a_documented_command_parses(argv):
    parser = build_parser()
    try:
        parser.parse_args(argv)
    except SystemExit as e:
        pytest.fail(f"`frozenvit {' '.join(argv)}` does not parse (exit {e.code})")
