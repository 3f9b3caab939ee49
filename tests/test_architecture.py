"""The folder tree states the architecture, and this test keeps it true (see docs/architecture.md).

Layers, each importing only those listed after it:
    apps (anomaly, control)  -> backbone runtime -> backbone.suite
    forecasting              -> backbone.suite; forecasting.frozen_vit alone may also import the backbone
                                runtime, and only inside functions (`import frozenvit.forecasting` loads no timm)
    backbone.distill         -> backbone runtime -> backbone.suite   (nothing imports the trainer)
No module imports another in a cycle (counting imports inside functions), and every import of our
code goes through the `frozenvit.` namespace (a bare `import control` would be python-control's).
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"backbone": "frozenvit.backbone", "anomaly": "frozenvit.anomaly", "forecasting": "frozenvit.forecasting",
           "control": "frozenvit.control"}


def _modules() -> dict[str, Path]:
    mods = {}
    for folder, pkg in FOLDERS.items():
        for f in (ROOT / folder).rglob("*.py"):
            parts = list(f.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join([pkg, *parts])] = f
    return mods


MODULES = _modules()


def _function_bodies(tree: ast.AST) -> set[int]:
    """ids of the import nodes that sit inside a function (run on call, not on import)."""
    inside = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside |= {id(n) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return inside


def _imports(name: str, path: Path, top_level_only: bool = False) -> set[str]:
    """Our modules that `name` imports anywhere in its file (top level or inside functions; with
    `top_level_only`, those imported when the module itself is imported)."""
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    found = set()
    tree = ast.parse(path.read_text())
    lazy = _function_bodies(tree) if top_level_only else set()
    for node in ast.walk(tree):
        if id(node) in lazy:
            continue
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                mod = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in MODULES:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}
EAGER = {m: _imports(m, p, top_level_only=True) for m, p in MODULES.items()}
LAZY_RUNTIME = {"frozenvit.forecasting.frozen_vit"}    # forecasting's one door to the ViT runtime, inside functions


def _layer(mod: str) -> str:
    for prefix, layer in (("frozenvit.backbone.suite", "suite"), ("frozenvit.backbone.distill", "distill"),
                          ("frozenvit.backbone", "runtime"), ("frozenvit.forecasting", "forecasting"),
                          ("frozenvit.anomaly", "anomaly"), ("frozenvit.control", "control")):
        if mod == prefix or mod.startswith(prefix + "."):
            return layer
    raise AssertionError(mod)


ALLOWED = {"suite": {"suite"}, "runtime": {"runtime", "suite"}, "distill": {"distill", "runtime", "suite"},
           "forecasting": {"forecasting", "suite"}, "anomaly": {"anomaly", "runtime", "suite"},
           "control": {"control", "runtime", "suite"}}


def test_the_graph_sees_every_package():
    assert {_layer(m) for m in MODULES} == set(ALLOWED)
    assert "frozenvit.backbone.suite.artifacts" in GRAPH["frozenvit.anomaly.artifact"]


@pytest.mark.parametrize("mod", sorted(MODULES))
def test_imports_point_down_the_layers(mod):
    allowed = ALLOWED[_layer(mod)] | ({"runtime"} if mod in LAZY_RUNTIME else set())
    wrong = sorted(t for t in GRAPH[mod] if _layer(t) not in allowed)
    assert not wrong, f"{mod} ({_layer(mod)}) imports {wrong}"


def test_forecasting_reaches_the_vit_runtime_only_lazily_from_frozen_vit():
    lazy = {m: sorted(t for t in GRAPH[m] if _layer(t) == "runtime") for m in MODULES if _layer(m) == "forecasting"}
    assert {m for m, t in lazy.items() if t} == LAZY_RUNTIME          # it does use the runtime, and nothing else does
    eager = sorted(t for m in LAZY_RUNTIME for t in EAGER[m] if _layer(t) == "runtime")
    assert not eager, f"frozen_vit imports the runtime at module level: {eager}"


def test_importing_forecasting_and_the_frozen_vit_model_loads_no_vision_code():
    import subprocess
    import sys

    code = ("import sys\n"
            "import frozenvit.forecasting as f\n"
            "f.FrozenViTForecaster(h=8); f.PatchTST(h=8); import frozenvit.forecasting.cli\n"
            "print(sorted(m for m in ('timm', 'torchvision', 'frozenvit.backbone.model', 'frozenvit.backbone.loading')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_no_module_imports_in_a_cycle():
    # package __init__ files only re-export lazily; an edge into one is an edge into its submodules' API
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(GRAPH[m]):
            if state.get(t) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(t):] + [t]))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)


@pytest.mark.parametrize("folder", ["backbone", "anomaly", "forecasting", "control", "tests", "benchmarks"])
def test_our_code_is_imported_only_through_the_frozenvit_namespace(folder):
    bare = []
    for f in (ROOT / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else []
            bare += [f"{f.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in FOLDERS]
    assert not bare


def test_frozenvit_control_lives_beside_python_control(tmp_path):
    import subprocess
    import sys

    # run outside the repository, where only installed packages are seen (here `import control` is our folder)
    code = ("import importlib.util, sys\n"
            "if importlib.util.find_spec('control') is None: print('no python-control'); sys.exit(0)\n"
            "import control, frozenvit.control\n"
            "from frozenvit.control import PatchTokenPolicy, evaluate\n"
            "from frozenvit.backbone import load_backbone\n"
            "from frozenvit.anomaly import PatchCore\n"
            "from frozenvit.forecasting import backtest\n"
            "print(callable(control.tf), frozenvit.control.__file__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    if out.stdout.startswith("no python-control"):
        pytest.skip("python-control is not installed (it is in the dev extra)")
    flag, where = out.stdout.split()
    assert flag == "True" and Path(where).parent == ROOT / "control"
