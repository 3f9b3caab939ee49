"""What can run an exported backbone: the names `--runtime` and `--format` take (no torch import, for --help)."""
FORMATS = ("onnx", "openvino")                                    # ONNX file; OpenVINO IR (.xml + .bin)
RUNTIMES = ("torch", "onnxruntime", "openvino")
DEFAULT_RUNTIME = "torch"
RUNTIME_OF = {"onnx": "onnxruntime", "openvino": "openvino"}      # the runtime a format is run with by default
FORMAT_OF = {"onnxruntime": "onnx", "openvino": "openvino"}       # the format `--runtime` exports to on the fly
