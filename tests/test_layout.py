"""The architecture's rule, enforced: the analysis side needs no torch, imports go one way (no cycle, no layer
importing one above it), nothing imports inside a function but the optional dependencies named below, and `probe
--help` imports no command module."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tokenize
from pathlib import Path

from tests.conftest import DATA, ROOT

PACKAGES = ("probe", "engines")
# Imports inside functions, each with its reason. An optional dependency imports where it is used, so a command
# that does not use it runs where it is not installed (the GPU machine has neither Ray nor DuckDB).
LATE_IMPORTS = {
    # transformers loads only when a config is first read, so building the CLI's flags stays fast
    ("engines/configs.py", "transformers"),
    ("probe/commands/analyze.py", "probe.cluster"),  # Ray, for --executor ray
    ("probe/capture/pipeline.py", "probe.cluster"),  # Ray
    ("probe/capture/pipeline.py", "probe.capture.raysweep"),  # Ray
    # scipy's stats take a second and a half to import and only a timing row with enough samples needs them, so
    # building `probe compare --help`, `probe ab --help` or a counts-only gate does not pay for them
    ("probe/analysis/regression/stats.py", "scipy"),
    # DuckDB, optional where probe measures (the GPU machine has none): a measuring command run with --no-history
    # never loads it (tests/test_run.py)
    ("probe/commands/_record.py", "probe.analysis.regression.history"),
}
# Files other helpers own that still import inside functions (to keep their commands' flags fast, or for DuckDB and
# NVML); this allowance only shrinks: the lead removes each entry once that file's imports are at the top.
NOT_YET_AT_THE_TOP = ("probe/commands/roofline.py",)
# Who may import whom inside probe: a layer never imports one above it. probe.render.text is a leaf (it imports nothing
# from probe), so every layer may use it.
FORBIDDEN = {
    "probe.analysis": ("probe.capture", "probe.commands", "probe.cli", "probe.render"),
    "probe.explorer": ("probe.capture", "probe.commands", "probe.cli", "probe.render"),
    "probe.render": ("probe.capture", "probe.commands", "probe.cli"),
    "probe.capture": ("probe.commands", "probe.cli"),
    # Inside the analysis, the packages are its floors, from the bottom (probe/analysis/__init__.py says what each
    # holds): intervals -> records -> trace -> ledger -> roofline | regression -> diagnosis.
    "probe.analysis.intervals": ("probe.analysis.",),
    "probe.analysis.records": (
        "probe.analysis.trace",
        "probe.analysis.ledger",
        "probe.analysis.roofline",
        "probe.analysis.regression",
        "probe.analysis.diagnosis",
    ),
    "probe.analysis.trace": (
        "probe.analysis.ledger",
        "probe.analysis.roofline",
        "probe.analysis.regression",
        "probe.analysis.diagnosis",
    ),
    "probe.analysis.ledger": ("probe.analysis.roofline", "probe.analysis.regression", "probe.analysis.diagnosis"),
    "probe.analysis.roofline": ("probe.analysis.regression", "probe.analysis.diagnosis"),
    "probe.analysis.regression": ("probe.analysis.roofline", "probe.analysis.diagnosis"),
}
LEAVES = {"probe.render.text": "probe"}
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
    "engines.arch",  # config -> parameters by kind and cache layout, the roofline's input
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


def _late_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, function) for every import inside a function of `path`."""
    tree = ast.parse(path.read_text())
    out = []
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
        for node in ast.walk(fn):
            if isinstance(node, ast.Import | ast.ImportFrom):
                out.append(
                    (node.lineno, node.module if isinstance(node, ast.ImportFrom) else node.names[0].name, fn.name)
                )
    return out


def _allowed(rel: str, module: str) -> bool:
    return (rel, module) in LATE_IMPORTS or (rel, module.split(".")[0]) in LATE_IMPORTS


def test_nothing_imports_inside_a_function_but_the_optional_dependencies():
    late = []
    for path in sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in NOT_YET_AT_THE_TOP:
            continue
        late += [
            f"{rel}:{line} imports {m} inside {fn}()" for line, m, fn in _late_imports(path) if not _allowed(rel, m)
        ]
    assert late == []


def test_the_allowances_name_only_what_is_still_there():
    """An entry whose import moved to the top must go, so the lists only shrink."""
    for rel in NOT_YET_AT_THE_TOP:
        assert _late_imports(ROOT / rel), f"{rel} imports nothing inside a function: remove it from NOT_YET_AT_THE_TOP"
    for rel, module in LATE_IMPORTS:
        assert any(m == module or m.split(".")[0] == module for _, m, _ in _late_imports(ROOT / rel)), (rel, module)


def test_no_layer_imports_one_above_it():
    known = _modules()
    wrong = []
    for name, path in known.items():
        for layer, above in FORBIDDEN.items():
            if name == layer or name.startswith(layer + "."):
                for target, _ in _imports(path, name, known):
                    if target.startswith(above) and target not in LEAVES:
                        wrong.append(f"{name} imports {target}")
        if name in LEAVES:
            wrong += [f"leaf {name} imports {t}" for t, _ in _imports(path, name, known) if t.startswith(LEAVES[name])]
    assert wrong == []


def test_help_imports_no_command_module():
    """`probe --help` is built from probe.cli.COMMANDS; a named subcommand imports its own module and no other."""
    code = (
        "import contextlib, io, sys\n"
        "from probe.cli import COMMANDS, main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n"
        "assert all(name in out.getvalue() for name in COMMANDS), out.getvalue()\n"
        "print(sorted(m for m in sys.modules if m.startswith('probe.commands.')))\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['analyze', '--help'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('probe.commands.')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", "['probe.commands.analyze']"]


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
    trace = DATA / "hand_decode.trace.json.gz"
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


def test_roofline_reads_presets_config_files_and_model_folders_without_torch(tmp_path):
    """config.json is read as plain JSON with the family defaults the roofline needs: no transformers, no torch."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text((DATA / "configs" / "deepseek_v3.json").read_text())
    (folder / "model.safetensors").write_bytes(b"")  # a folder with weights: they are never opened
    (tmp_path / "bert.json").write_text('{"model_type": "bert", "hidden_size": 64}')
    specs = ["qwen2.5-1.5b", "llama-3-8b", str(DATA / "configs" / "qwen3_next.json"), str(folder)]
    for spec in specs:
        code = (
            "from probe.cli import main\n"
            f"rc = main(['roofline', '--model', {spec!r}, '--new-tokens', '8', '--json'])\n"
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\nsys.exit(rc)"
        )
        result = _without_torch(code, tmp_path)
        assert result.returncode == 0, (spec, result.stderr[-2000:])
    code = f"from probe.cli import main\nsys.exit(main(['roofline', '--model', {str(tmp_path / 'bert.json')!r}]))"
    result = _without_torch(code, tmp_path)
    assert result.returncode == 2 and "torch is not importable here" in result.stderr
    assert result.stderr.count("\n") == 1


# ---- every module path the docs name exists ----------------------------------------------------------------------

# A dotted name (`probe.analysis.records.sidecar.trace_meta`) or a path (`probe/analysis/ledger/steps.py`) in the docs,
# a docstring or a comment. Paths under tests/ are left out: the docs also name the anchors' own tests (HTA's
# tests/test_trace_diff.py, TraceLens's tests/traces/). CHANGELOG.md is history: it names what was.
DOTTED = re.compile(r"(?<![\w./-])((?:probe|engines)(?:\.[A-Za-z_]\w*)+)")
SLASHED = re.compile(r"(?<![\w./-])((?:probe|engines|scripts|benchmarks|docs)/[\w./*-]*[\w/*])")
FILE_SUFFIXES = ("py", "md", "json", "gz", "txt", "csv", "png", "parquet", "sqlite")


def _doc_texts() -> list[tuple[Path, int, str]]:
    """(file, line, text) of every Markdown line and every Python comment and string in the repository."""
    out = []
    for path in [*ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md")]:
        if path.name != "CHANGELOG.md":
            out += [(path, i, line) for i, line in enumerate(path.read_text().splitlines(), 1)]
    sources = [
        ROOT / "app.py",
        *(p for d in ("probe", "engines", "tests", "scripts", "benchmarks") for p in (ROOT / d).rglob("*.py")),
    ]
    wanted = {tokenize.COMMENT, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    for path in sources:
        with open(path, "rb") as f:
            out += [(path, t.start[0], t.string) for t in tokenize.tokenize(f.readline) if t.type in wanted]
    return out


def _top_level(path: Path) -> dict[str, ast.AST | None]:
    """A module's top-level names: its defs and classes (their nodes), its assignments and imports (None)."""
    names: dict[str, ast.AST | None] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.Import | ast.ImportFrom):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            names |= {n.id: None for t in targets if t for n in ast.walk(t) if isinstance(n, ast.Name)}
            if isinstance(node, ast.Import | ast.ImportFrom):
                names |= {(a.asname or a.name).split(".")[0]: None for a in node.names}
    return names


def _module_file(parts: list[str]) -> Path | None:
    folder = ROOT.joinpath(*parts)
    for candidate in (folder / "__init__.py", folder.with_suffix(".py"), folder):
        if candidate.exists():
            return candidate
    return None


def _resolves(dotted: str) -> bool:
    """Whether a dotted name is a module, a module's top-level name, or a class's member, read from the source."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        path = _module_file(parts[:k])
        if path is None:
            continue
        rest = parts[k:]
        if not rest:
            return True
        if path.is_dir() or rest[0] not in (names := _top_level(path)):
            return False
        node = names[rest[0]]
        if len(rest) == 1 or not isinstance(node, ast.ClassDef):
            return True  # an attribute of something imported or assigned is not followed
        members = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        return rest[1] in members | {getattr(n, "name", None) for n in node.body}
    return False


def test_the_pointer_check_tells_a_stale_name_from_a_live_one():
    assert _resolves("probe.analysis.records.sidecar.trace_meta") and _resolves("probe.capture.loop.Generation")
    assert _resolves("probe.analysis.ledger.ranks.JobCheck.one_job") and _resolves("probe.analysis")
    ranks = ".".join(("probe", "analysis", "ledger", "ranks"))  # joined, so the scan below does not read them
    assert not _resolves(".".join(("probe", "compare", "trace_meta"))) and not _resolves(f"{ranks}.no_such_name")
    assert not _resolves(f"{ranks}.JobCheck.no_such_member")


def test_every_module_path_the_docs_name_exists():
    stale = []
    for path, line, text in _doc_texts():
        where = f"{path.relative_to(ROOT)}:{line}"
        for match in DOTTED.finditer(text):
            name = match.group(1)
            if name.rsplit(".", 1)[-1] not in FILE_SUFFIXES and not _resolves(name):
                stale.append(f"{where}: {name}")
        for match in SLASHED.finditer(text):
            if not any(ROOT.glob(match.group(1).rstrip("/"))):
                stale.append(f"{where}: {match.group(1)}")
    assert not stale, "\n".join(stale)
