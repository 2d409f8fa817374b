"""The architecture's rule, enforced: the analysis side needs no torch, imports go one way, and only the CLI's
commands import inside functions (to keep `probe --help` fast)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import DATA, ROOT

PACKAGES = ("probe", "engines")
# Imports inside functions outside probe/commands, each with its reason.
LATE_IMPORTS = {
    # transformers loads only when a config is first read, so building the CLI's flags stays fast
    ("engines/configs.py", "transformers"),
}
# The torch-free side: every module here must import, and the analysis commands must run, without torch.
TORCH_FREE = (
    "probe.analysis",
    "probe.explorer",
    "probe.render",
    "probe.flags",
    "probe.vocabulary",
    "probe.cli",
    "probe.cluster",  # Ray's side: a Ray task that analyzes traces must not need torch either
    "probe.capture.config",
    "probe.settings",  # the config dataclasses results files and sidecars are read back into
    "engines.configs",
)

HIDE_TORCH = """
import importlib.machinery, sys
_find = importlib.machinery.PathFinder.find_spec
def _hidden(name, path=None, target=None):
    if name == "torch" or name.startswith("torch."):
        return None  # as if torch were not installed
    return _find(name, path, target)
importlib.machinery.PathFinder.find_spec = staticmethod(_hidden)
"""


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _imports(path: Path, name: str, known: dict[str, Path]) -> list[tuple[str, bool]]:
    """(project module imported, whether the import sits inside a function) for every import in the file."""
    tree = ast.parse(path.read_text())
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            inside |= {id(n) for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.append((target, id(node) in inside))
                break
    return out


def test_no_import_cycle_counting_imports_inside_functions():
    known = _modules()
    graph = {name: {t for t, _ in _imports(path, name, known)} for name, path in known.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt) :] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)


def test_only_commands_import_inside_functions():
    late = []
    for path in sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("probe/commands/"):
            continue
        tree = ast.parse(path.read_text())
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                    if (rel, module.split(".")[0]) not in LATE_IMPORTS:
                        late.append(f"{rel}:{node.lineno} imports {module} inside {fn.name}()")
    assert late == []


def _without_torch(code: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", HIDE_TORCH + code], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_the_analysis_core_imports_without_torch():
    names = [n for n in _modules() if n.startswith(TORCH_FREE)]
    code = (
        "import importlib\n"
        f"for name in {names!r}:\n    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    )
    result = _without_torch(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_analyze_compare_and_roofline_run_without_torch(tmp_path):
    trace = DATA / "rocm_vllm_decode_cudagraph.trace.json.gz"
    baseline = ROOT / "baselines" / "cpu-tiny.json"
    calls = [
        ["analyze", str(trace), "--json"],
        ["compare", str(baseline), str(baseline), "--counts-only"],
        ["roofline", "--model", "tiny", "--dtype", "float32"],
        ["roofline", "--check"],
    ]
    for argv in calls:
        code = f"from probe.cli import main\nrc = main({argv!r})\nassert 'torch' not in sys.modules\nsys.exit(rc)"
        result = _without_torch(code, tmp_path)
        assert result.returncode == 0, (argv, result.stderr[-2000:])


def test_every_benchmark_still_parses_its_flags():
    """The benchmarks are not run by the suite (they measure); their imports and flags must still follow the API."""
    files = sorted((ROOT / "benchmarks").glob("*.py"))
    scripts = [p.stem for p in files if 'if __name__ == "__main__":' in p.read_text()]
    assert "reconcile" in scripts and "many_traces" in scripts and "paired" not in scripts  # paired: a library
    for name in scripts:
        result = subprocess.run(
            [sys.executable, "-m", f"benchmarks.{name}", "--help"], cwd=ROOT, capture_output=True, text=True
        )
        assert result.returncode == 0 and "usage:" in result.stdout, (name, result.stderr[-2000:])
