"""Package exports are lazy (no torch for `frozenvit --help`) yet behave like eager imports."""
import subprocess
import sys

import pytest


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.parametrize("pkg,name", [("frozenvit.control", "evaluate"), ("frozenvit.forecasting", "backtest")])
def test_a_function_named_like_its_module_stays_the_function_after_the_module_is_imported(pkg, name):
    got = _run(f"import {pkg}.{name}\nimport {pkg}\nfrom {pkg} import {name}\n"
               f"print(callable({name}), callable(getattr({pkg}, {name!r})))")
    assert got == "True True"


def test_building_the_cli_parser_imports_neither_torch_nor_the_applications():
    got = _run("import sys\nfrom frozenvit.backbone.suite.cli import build_parser\nbuild_parser()\n"
               "print(sorted(m for m in ('torch', 'faiss', 'metaworld', 'statsforecast') if m in sys.modules))")
    assert got == "[]"
