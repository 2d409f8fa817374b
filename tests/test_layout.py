"""The architecture's rule, enforced: the analysis side needs no torch, imports go one way (no cycle, no layer
importing one above it), nothing imports inside a function but the optional dependencies named below and a command's
heavy modules, `probe --help` imports no command module, and no `probe COMMAND --help` imports a heavy one."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from probe.cli import COMMANDS
from tests.conftest import DATA, ROOT

PACKAGES = ("probe", "engines")
# Imports inside functions outside probe/commands/ (where HEAVY below rules), each with its reason. An optional
# dependency imports where it is used, so a command that does not use it runs where it is not installed (the GPU
# machine has neither Ray nor DuckDB).
LATE_IMPORTS = {
    # transformers loads only when a config is first read, so building the CLI's flags stays fast
    ("engines/configs.py", "transformers"),
    ("probe/capture/pipeline.py", "probe.cluster"),  # Ray
    ("probe/capture/pipeline.py", "probe.capture.raysweep"),  # Ray
    # scipy's stats take a second and a half to import and only a timing row with enough samples needs them, so
    # building `probe compare --help`, `probe ab --help` or a counts-only gate does not pay for them
    ("probe/analysis/regression/stats.py", "scipy"),
}
# What a command imports when it runs and its `--help` never does: each takes from a tenth of a second (rich, numpy and
# the analysis built on it) to seconds (torch, transformers) to import, where `probe COMMAND --help` answers in a blink
# (docs/commands.md, benchmarks/help_bench.py). So a command module (probe/commands/) imports at its top only what
# its flags need (probe.flags, probe.settings, engines.configs), and inside the functions that run it, a module that
# loads one of these; a project module counts when its own top-level imports reach one of them.
HEAVY = ("torch", "transformers", "pandas", "pyarrow", "scipy", "duckdb", "ray", "streamlit", "plotly", "numpy", "rich")
COMMANDS_DIR = "probe/commands/"
# Who may import whom inside probe: a layer never imports one above it. probe.text (units, names, escaping) is a leaf
# (it imports nothing from probe), so every layer may use it: the terminal, the explorer and the analysis's sentences
# say a figure through the one definition.
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
LEAVES = {"probe.text": "probe"}
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


def _late_imports(path: Path) -> list[tuple[int, str, str, list[str]]]:
    """(line, module, function, what it may load) for every import inside a function of `path`."""
    tree = ast.parse(path.read_text())
    out = []
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
        for node in ast.walk(fn):
            if isinstance(node, ast.Import | ast.ImportFrom):
                module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                out.append((node.lineno, module or "", fn.name, _targets(node)))
    return out


def _targets(node: ast.Import | ast.ImportFrom) -> list[str]:
    """What an import statement may load: each module it names, and for `from m import x` also m.x (a submodule)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level or not node.module:
        return []
    return [node.module] + [f"{node.module}.{a.name}" for a in node.names]


def _import_time(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is imported: none inside a function or under `if TYPE_CHECKING:`."""
    out, stack = [], list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            stack += node.orelse
        elif isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        else:
            stack += ast.iter_child_nodes(node)
    return out


@functools.cache
def _heavy_modules() -> frozenset[str]:
    """The project modules whose import loads a HEAVY package: itself, or through the project modules (and their
    packages' __init__) it imports at its top."""
    known = _modules()

    def loaded(target: str) -> set[str]:
        """`target` and the packages above it, as far as they are project modules; else its third-party root."""
        if target.split(".")[0] not in PACKAGES:
            return {target.split(".")[0]}
        parts = target.split(".")
        return {m for m in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if m in known}

    loads = {
        name: set().union(*(loaded(t) for node in _import_time(ast.parse(path.read_text())) for t in _targets(node)))
        | loaded(name) - {name}
        for name, path in known.items()
    }
    heavy = {name for name, deps in loads.items() if deps & set(HEAVY)}
    while grown := {name for name, deps in loads.items() if deps & heavy} - heavy:
        heavy |= grown
    return frozenset(heavy)


def _heavy(targets: list[str]) -> bool:
    return any(t.split(".")[0] in HEAVY or t in _heavy_modules() for t in targets)


def _allowed(rel: str, module: str, targets: list[str]) -> bool:
    if rel.startswith(COMMANDS_DIR) and _heavy(targets):
        return True  # a command's heavy modules, imported when it runs
    return (rel, module) in LATE_IMPORTS or (rel, module.split(".")[0]) in LATE_IMPORTS


def test_nothing_imports_inside_a_function_but_the_optional_dependencies_and_a_commands_heavy_modules():
    late = []
    for path in sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        late += [
            f"{rel}:{line} imports {m} inside {fn}()"
            for line, m, fn, targets in _late_imports(path)
            if not _allowed(rel, m, targets)
        ]
    assert late == []


def test_a_command_module_imports_nothing_heavy_at_its_top():
    """What `probe COMMAND --help` loads is the command's module and what it imports at its top: its flags."""
    assert sorted(f"probe.commands.{name}" for name in COMMANDS if f"probe.commands.{name}" in _heavy_modules()) == []


def test_the_heavy_rule_reads_imports_through_packages_and_skips_type_checking_and_functions():
    """The rule's own check: a module is heavy through what it imports at its top, transitively."""
    heavy = _heavy_modules()
    assert "engines.models" in heavy  # imports torch
    assert "probe.capture.pipeline" in heavy  # through engines and probe.capture.sweep
    assert "probe.analysis.regression.history" in heavy  # DuckDB, through its package's __init__
    assert "probe.analysis.regression.rules" not in heavy  # CompareRules: the flags of compare, ab and history
    assert "probe.settings" not in heavy and "engines.configs" not in heavy  # transformers only inside a function
    assert "probe.commands._record" not in heavy  # its results type (pandas) only under TYPE_CHECKING


def test_the_allowances_name_only_what_is_still_there():
    """An entry whose import moved to the top, or that the commands' rule covers, must go: the list only shrinks."""
    for rel, module in LATE_IMPORTS:
        assert any(m == module or m.split(".")[0] == module for _, m, _, _ in _late_imports(ROOT / rel)), (rel, module)
        assert not rel.startswith(COMMANDS_DIR), (rel, module)


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


# `probe NAME --help`, and the --help of every subcommand under it (history list, check, ...), in one fresh process:
# a line each, the command and the HEAVY packages then loaded.
HELP_IMPORTS = """
import contextlib, io, sys
from probe.cli import command_lines, main

for argv in command_lines(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):
        main([*argv, "--help"])
    assert out.getvalue().startswith("usage: probe " + " ".join(argv)), out.getvalue()
    print(" ".join(argv), sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[2:])))
"""


@pytest.mark.parametrize("name", COMMANDS)
def test_help_imports_nothing_heavy(name):
    """`probe NAME --help` (and each of its subcommands') answers from the flags alone: no torch, transformers,
    pandas, DuckDB, Ray, Streamlit, scipy, numpy or rich is loaded to print it."""
    result = subprocess.run(
        [sys.executable, "-c", HELP_IMPORTS, name, *HEAVY], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines and all(line.endswith(" []") for line in lines), lines


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


# `python -m benchmarks.NAME --help` for each NAME given, each run as __main__ in this one process, so that torch and
# the rest load once for all of them (a process each took two minutes on the loaded 2-core machine): a line each,
# the name and whether its usage was printed.
BENCHMARK_HELP = """
import contextlib, io, runpy, sys

for name in sys.argv[1:]:
    sys.argv = [name, "--help"]
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):
        runpy.run_module(f"benchmarks.{name}", run_name="__main__", alter_sys=True)
    print(name, "usage:" in out.getvalue())
"""


def test_every_benchmark_still_parses_its_flags():
    """The benchmarks are not run by the suite (they measure); their imports and flags must still follow the API."""
    files = sorted((ROOT / "benchmarks").glob("*.py"))
    scripts = [p.stem for p in files if 'if __name__ == "__main__":' in p.read_text()]
    assert "reconcile" in scripts and "many_traces" in scripts and "paired" not in scripts  # paired: a library
    result = subprocess.run(
        [sys.executable, "-c", BENCHMARK_HELP, *scripts], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [f"{name} True" for name in scripts], result.stderr[-2000:]


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

# A dotted name (`probe.analysis.records.sidecar.read_sidecar`) or a path (`probe/analysis/ledger/steps.py`) in the
# docs, a docstring or a comment. Paths under tests/ are left out: the docs also name the anchors' own tests (HTA's
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
    assert _resolves("probe.analysis.records.sidecar.read_sidecar") and _resolves("probe.capture.loop.Generation")
    assert _resolves("probe.analysis.ledger.ranks.RanksCheck.one_job") and _resolves("probe.analysis")
    ranks = ".".join(("probe", "analysis", "ledger", "ranks"))  # joined, so the scan below does not read them
    assert not _resolves(".".join(("probe", "compare", "read_sidecar"))) and not _resolves(f"{ranks}.no_such_name")
    assert not _resolves(f"{ranks}.RanksCheck.no_such_member")


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


def _marked(node: ast.AST, mark: str) -> bool:
    """Whether `node` (a decorator or a pytestmark value) names pytest.mark.<mark> anywhere in it."""
    return any(isinstance(n, ast.Attribute) and n.attr == mark for n in ast.walk(node))


def test_every_test_file_keeps_a_test_in_the_default_run():
    """`pytest -q` (the default run deselects `slow`) holds at least one test of each test file, so no module's tests
    drop out of the run a contributor makes before every commit; the slow rest runs under `pytest -m slow`."""
    all_slow = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        tree = ast.parse(path.read_text())
        module_marks = [n.value for n in tree.body if isinstance(n, ast.Assign) and "pytestmark" in ast.unparse(n)]
        tests = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
        fast = [t for t in tests if not any(_marked(d, "slow") for d in t.decorator_list)]
        if any(_marked(m, "slow") for m in module_marks) or not fast:
            all_slow.append(path.name)
    assert all_slow == []
