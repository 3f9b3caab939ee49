"""What can run an exported backbone: the names `--runtime` and `--format` take, and the `--runtime` option of
every command that encodes images (no torch import, for --help)."""
from __future__ import annotations

import argparse

FORMATS = ("onnx", "openvino")                                    # ONNX file; OpenVINO IR (.xml + .bin)
RUNTIMES = ("torch", "onnxruntime", "openvino")
DEFAULT_RUNTIME = "torch"
RUNTIME_OF = {"onnx": "onnxruntime", "openvino": "openvino"}      # the runtime a format is run with by default
FORMAT_OF = {"onnxruntime": "onnx", "openvino": "openvino"}       # the format `--runtime` exports to on the fly


def add_runtime_arg(parser: argparse.ArgumentParser, several: bool = False) -> None:
    """--runtime: what runs the backbone's forward; the rest of the command is the same Python code."""
    if several:
        parser.add_argument("--runtime", type=runtime_list, default=DEFAULT_RUNTIME, metavar="NAMES",
                            help=f"comma-separated runtimes to compare in one run, timed in interleaved rounds "
                                 f"({', '.join(RUNTIMES)}); onnxruntime and openvino run the backbone exported at its "
                                 f"input size (pip install 'frozenvit[deploy]')")
        return
    parser.add_argument("--runtime", choices=RUNTIMES, default=DEFAULT_RUNTIME,
                        help="what runs the backbone: torch eager, or the backbone exported to ONNX and run by "
                             "onnxruntime, or to OpenVINO IR and run by OpenVINO (pip install 'frozenvit[deploy]')")


def runtime_list(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [n for n in names if n not in RUNTIMES]
    if not names or bad or len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"expected distinct names among {', '.join(RUNTIMES)} separated by commas, "
                                         f"got {text!r}")
    return names
