"""The engine's layers, checked on the source (an AST walk) and in fresh processes: only the page imports Streamlit,
only the figures plotly; the reading layer and the formats never import the page's layers above them; importing the
store leaves streamlit and plotly out of sys.modules."""

import ast
import subprocess
import sys

from tests.conftest import PROJECT

PACKAGE = PROJECT / "rl_board"
# The package's layers from the bottom up: a module imports only modules of its own layer and of those below. The
# formats sit inside the reading layer: they read files through storage and lines, and the store and the snapshot
# ask them. rl_board/__init__ and run.py, the API, are on top, with indexing.py and __main__.py, the command line.
LAYERS = [
    ["rl_board.text", "rl_board.tokenizer"],
    ["rl_board.reading.storage", "rl_board.reading.lines", "rl_board.reading.index", "rl_board.reading.history", "rl_board.reading.images", "rl_board.reading.workers", "rl_board.reading.trackio_db", "rl_board.reading.wandb_log", "rl_board.reading.summaries"],
    ["rl_board.formats"],
    ["rl_board.reading.snapshot", "rl_board.reading.store", "rl_board.reading.search"],
    ["rl_board.metrics", "rl_board.mismatch", "rl_board.update", "rl_board.trajectory", "rl_board.watch", "rl_board.changes", "rl_board.staleness", "rl_board.signals"],
    ["rl_board.figures"],
]


def layer_of(module: str) -> int:
    return next(number for number, layer in enumerate(LAYERS) for part in layer if module == part or module.startswith(part + "."))


def module_name(path) -> str:
    return ".".join(path.relative_to(PROJECT).with_suffix("").parts).removesuffix(".__init__")


def imported_modules(path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module)
    return names


MODULES = {module_name(path): imported_modules(path) for path in sorted(PACKAGE.rglob("*.py"))}


def test_only_the_page_imports_streamlit_and_only_the_figures_plotly():
    for module, imports in MODULES.items():
        assert not {name for name in imports if name.split(".")[0] == "streamlit"}, module
        if module != "rl_board.figures":
            assert not {name for name in imports if name.split(".")[0] == "plotly"}, module
    page = imported_modules(PROJECT / "rl_logging_board.py")
    assert "streamlit" in page and not {name for name in page if name.split(".")[0] in ("torch", "trl", "transformers")}


def test_each_module_imports_only_its_layer_and_the_layers_below():
    for module, imports in MODULES.items():
        if module in ("rl_board", "rl_board.run", "rl_board.reading", "rl_board.indexing", "rl_board.__main__"):
            continue
        above = sorted(name for name in imports if name.split(".")[0] == "rl_board" and layer_of(name) > layer_of(module))
        assert above == [], f"{module} imports {above}, of a layer above its own"


def test_the_store_and_the_formats_import_neither_streamlit_nor_plotly():
    code = "import sys, rl_board.reading.store, rl_board.formats; print(sorted({m.split('.')[0] for m in sys.modules} & {'streamlit', 'plotly', 'torch'}))"
    result = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
