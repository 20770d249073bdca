"""bench/ is fenced off from codedojo's insides: its scripts use public names only (issue 43).

A benchmark that imports or patches a private name breaks silently when that name is renamed, and keeps a
refactor from changing what it measures without anyone noticing. So every bench/*.py is parsed, and any of
these fails the test, naming the file and line:

- importing a private codedojo module or name (`from codedojo.x import _y`, `import codedojo._x`);
- reading, writing or deleting a private attribute (`._y`) of anything imported from codedojo, or of any other
  object when `_y` is a private name codedojo defines (a function, class, module global, method or `self._y`
  attribute: `model._pack()` on an engine model); the script's own `self._y` and `cls._y` are its business;
- the same through `getattr`, `setattr`, `delattr`, `hasattr` or a `monkeypatch.setattr` with the name as a
  string.

A switch a benchmark flips goes through a public record instead (`codedojo.inference.EngineOptions`).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
SOURCE = ROOT / "src" / "codedojo"
BY_NAME = {"getattr", "setattr", "delattr", "hasattr"}


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@functools.cache
def codedojo_private_names() -> frozenset[str]:
    """Every private name bound anywhere in codedojo's source: defs, classes, assignments, attributes set."""
    names: set[str] = set()
    for path in SOURCE.rglob("*.py"):
        names.update(part for part in path.relative_to(SOURCE).with_suffix("").parts if private(part))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
    return frozenset(name for name in names if private(name))


def _is_codedojo(module: str | None) -> bool:
    return module is not None and (module == "codedojo" or module.startswith("codedojo."))


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def violations(path: Path) -> list[str]:
    """`file:line: what` for each private codedojo name `path` imports or touches."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[str] = []
    bound: set[str] = set()  # names this file binds to codedojo modules or objects

    def report(node: ast.AST, what: str) -> None:
        found.append(f"{path.relative_to(path.parents[1])}:{getattr(node, 'lineno', '?')}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_codedojo(alias.name):
                    bound.add(alias.asname or alias.name.partition(".")[0])
                    if any(private(part) for part in alias.name.split(".")):
                        report(node, f"imports the private module {alias.name}")
        elif isinstance(node, ast.ImportFrom) and _is_codedojo(node.module):
            assert node.module is not None
            if any(private(part) for part in node.module.split(".")):
                report(node, f"imports from the private module {node.module}")
            for alias in node.names:
                bound.add(alias.asname or alias.name)
                if private(alias.name):
                    report(node, f"imports the private name {alias.name} from {node.module}")
    private_names = codedojo_private_names()

    def touches(owner: ast.expr, name: str) -> bool:
        if not private(name) or (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
            return False
        return _root_name(owner) in bound or name in private_names

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and touches(node.value, node.attr):
            report(node, f"touches the private codedojo name {node.attr}")
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            func = node.func
            by_name = (isinstance(func, ast.Name) and func.id in BY_NAME) or (
                isinstance(func, ast.Attribute) and func.attr == "setattr" and _root_name(func) == "monkeypatch")
            name = node.args[1]
            if by_name and isinstance(name, ast.Constant) and isinstance(name.value, str) \
                    and touches(node.args[0], name.value):
                report(node, f"touches the private codedojo name {name.value} by name")
    return sorted(set(found), key=lambda line: (line.split(":")[0], int(line.split(":")[1])))


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda path: path.name)
def test_benchmarks_use_only_public_codedojo_names(path: Path) -> None:
    problems = violations(path)
    assert not problems, "bench/ uses codedojo's private names (make a public one or change the bench):\n" + \
        "\n".join(problems)


def test_the_fence_sees_every_way_in_and_leaves_the_scripts_own_names_alone(tmp_path: Path) -> None:
    """Hand-written: each form of access is caught on its own line; a script's own privates, a third party's
    and codedojo's public names are not."""
    bench = tmp_path / "bench"
    bench.mkdir()
    script = bench / "probe.py"
    script.write_text(
        "import codedojo.train.packed as packed\n"                    # 1
        "from codedojo.inference import transformer, LocalEngine\n"   # 2
        "from codedojo.inference.sampler import _inverse_cdf\n"       # 3: private name
        "import codedojo._hidden\n"                                   # 4: private module
        "packed._chunk_logits = None\n"                               # 5: write, through a module alias
        "transformer._anything()\n"                                   # 6: any private name of an import
        "LocalEngine._post\n"                                         # 7: a class imported from codedojo
        "model = transformer.Transformer\n"
        "model._pack()\n"                                             # 9: codedojo's name, on another object
        "setattr(model, '_packed', None)\n"                           # 10: by name
        "monkeypatch.setattr(packed, '_cpu_flash', None)\n"           # 11: monkeypatch by name
        "import torch\n"
        "torch._C._get_mkldnn_enabled()\n"                            # a third party's privates: not ours
        "class Peer:\n"
        "    def __init__(self):\n"
        "        self._pack = None\n"                                 # the script's own: allowed
        "    def step(self):\n"
        "        return self._pack\n"
        "x = transformer.rms_norm, LocalEngine.__name__\n"            # public and dunder: allowed
    )
    lines = [int(problem.split(":")[1]) for problem in violations(script)]
    assert lines == [3, 4, 5, 6, 7, 9, 10, 11]
    assert all(problem.startswith("bench/probe.py:") for problem in violations(script))
