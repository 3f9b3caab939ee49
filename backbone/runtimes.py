"""What can run an exported backbone: the names `--runtime`, `--precision` and `--format` take, and the
`--runtime` option of every command that encodes images (no torch import, for --help)."""
from __future__ import annotations

import argparse

FORMATS = ("onnx", "openvino")                                    # ONNX file; OpenVINO IR (.xml + .bin)
RUNTIMES = ("torch", "onnxruntime", "openvino")
DEFAULT_RUNTIME = "torch"
CALIBRATION_IMAGES = 32                                           # int8: images it is calibrated on, at most
RUNTIME_OF = {"onnx": "onnxruntime", "openvino": "openvino"}      # the runtime a format is run with by default
FORMAT_OF = {"onnxruntime": "onnx", "openvino": "openvino"}       # the format `--runtime` exports to on the fly
# the arithmetic of an exported graph: float32 (parity with torch eager), bfloat16 (OpenVINO on a CPU that multiplies
# it natively), int8 (static post-training quantisation, calibrated on images). Reduced precision is asked, never chosen.
PRECISIONS = ("float32", "bfloat16", "int8")
DEFAULT_PRECISION = "float32"
PRECISIONS_OF = {"torch": ("float32",), "onnxruntime": ("float32", "int8"), "openvino": PRECISIONS}
# an export of one graph per member (`frozenvit export anomaly` of an ensemble): one artifact folder written by one
# `atomic_dir` (one rename), holding member0/, member1/, ... (each a "backbone.export") and SET_FILE listing them
SET_KIND = "backbone.export.members"
SET_FILE = "members.json"


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


def add_precision_arg(parser: argparse.ArgumentParser) -> None:
    """--precision, with --calibration and --calibration-images for int8: the arithmetic of --runtime's graph."""
    from .suite.cli import number

    parser.add_argument("--precision", type=precision_list, default=DEFAULT_PRECISION, metavar="P[,P...]",
                        help=f"arithmetic of the exported backbone ({', '.join(PRECISIONS)}): float32 (as torch); "
                             "bfloat16 (--runtime openvino, on a CPU with AMX or AVX512-BF16); int8 (static "
                             "quantisation calibrated on --calibration, --runtime onnxruntime or openvino). One for "
                             "every member of an ensemble, or one per member in its order (float32,bfloat16). The "
                             "metric it costs is yours to measure (anomaly evaluate)")
    parser.add_argument("--calibration", nargs="+", default=None, metavar="PATH",
                        help="--precision int8: normal image files or folders to calibrate the quantisation on")
    parser.add_argument("--calibration-images", type=number(int, min=1), default=CALIBRATION_IMAGES, metavar="N",
                        help="--precision int8: use at most this many calibration images")


def precision_list(text: str) -> tuple[str, ...]:
    """argparse type of --precision: one name of PRECISIONS, or several separated by commas (one per member)."""
    names = tuple(t.strip() for t in text.split(","))
    if not all(n in PRECISIONS for n in names):
        raise argparse.ArgumentTypeError(f"expected {', '.join(PRECISIONS)} or a comma-separated list of them, "
                                         f"got {text!r}")
    return names


def runtime_list(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [n for n in names if n not in RUNTIMES]
    if not names or bad or len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"expected distinct names among {', '.join(RUNTIMES)} separated by commas, "
                                         f"got {text!r}")
    return names
