"""No package imports upward: the packages form layers (docs/architecture.md), and a module may import only
from layers below its own, at module level or inside a function alike.

The `codedojo` command's modules (`codedojo/cli.py` and each package's `cli.py` / `*_cli.py`, which register
subcommands) sit on top: they may import anything. Exceptions are listed with the reason, and one that no
longer occurs fails the test, so the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import codedojo

SRC = Path(codedojo.__file__).parent
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"records", "progress", "cache", "journal", "memory", "threads", "precision"}),  # foundations
    frozenset({"tasks"}),
    frozenset({"sandbox"}),
    frozenset({"trial"}),
    frozenset({"inference"}),
    frozenset({"rl"}),
    frozenset({"config"}),
    frozenset({"agent"}),
    frozenset({"rollout"}),
    frozenset({"data"}),
    frozenset({"train"}),
    frozenset({"integrations"}),
)
"""Bottom to top. Within the foundations, modules may import each other; elsewhere a layer is one package."""
CLI = len(LAYERS)
ALLOWED: dict[tuple[str, str], str] = {
    ("codedojo.train.default", "codedojo.cli"):
        "the main job generates the bundled suite through `codedojo tasks builtin`, the factory's only entry "
        "point; a public factory function would change the suite cache's digest (every cached suite regenerates)",
}


def _module(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) < 2 or parts[1] == "cli" or parts[-1] == "cli" or parts[-1].endswith("_cli"):
        return CLI
    for index, layer in enumerate(LAYERS):
        if parts[1] in layer:
            return index
    raise AssertionError(f"{module}: package {parts[1]!r} is in no layer; add it to LAYERS (and architecture.md)")


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("codedojo.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("codedojo."):
            found.append((node.lineno, node.module or ""))
    return found


def upward_imports() -> tuple[list[str], set[tuple[str, str]]]:
    problems, excused = [], set()
    for path in sorted(SRC.rglob("*.py")):
        module = _module(path)
        mine = _layer(module)
        for line, target in _imports(path):
            theirs = _layer(target)
            free = mine == CLI or mine == theirs == 0  # the command's modules, and foundations among themselves
            if theirs < mine or free or target.split(".")[:2] == module.split(".")[:2]:
                continue
            if (module, ".".join(target.split(".")[:2])) in ALLOWED:
                excused.add((module, ".".join(target.split(".")[:2])))
                continue
            problems.append(f"{path.relative_to(SRC.parent)}:{line}: {module} (layer {mine}) imports {target} "
                            f"(layer {theirs}), which is not below it")
    return problems, excused


def test_no_package_imports_a_package_above_it() -> None:
    problems, excused = upward_imports()
    assert not problems, "\n".join(problems)
    assert excused == set(ALLOWED), f"exceptions that no longer occur: {set(ALLOWED) - excused}; remove them"


def test_the_check_sees_an_upward_import(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The check is not vacuous: a tasks module importing the trainer is reported, at its line."""
    import shutil

    copy = tmp_path / "codedojo"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.gguf"))
    (copy / "tasks" / "upward.py").write_text("def f():\n    from codedojo.train.trainer import LocalTrainer\n")
    monkeypatch.setattr(__import__(__name__), "SRC", copy)
    problems, _ = upward_imports()
    assert problems == ["codedojo/tasks/upward.py:2: codedojo.tasks.upward (layer 1) imports "
                        "codedojo.train.trainer (layer 10), which is not below it"]


RECIPE_READERS = {"plan.py", "launch.py", "default.py", "cli.py", "sft_cli.py"}
"""Under train/: the launch translation (plan, launch) and the modules that build a recipe (the main job and
the command); everything else reads the typed plan."""


def recipe_reads(source: str, where: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and (
                (isinstance(node.value, ast.Name) and node.value.id == "recipe")
                or (isinstance(node.value, ast.Attribute) and node.value.attr == "recipe")):
            found.append(f"{where}:{node.lineno}: reads recipe.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and any(alias.name == "Recipe" for alias in node.names):
            found.append(f"{where}:{node.lineno}: imports Recipe")
    return found


def test_the_trainer_reads_no_recipe_field_outside_the_launch_translation() -> None:
    found = []
    for path in sorted((SRC / "train").glob("*.py")):
        if path.name not in RECIPE_READERS:
            found += recipe_reads(path.read_text(encoding="utf-8"), f"train/{path.name}")
    assert not found, "\n".join(found) + "\nput the field in train.plan.TrainPlan (plan_for) and read it there"
    assert recipe_reads("def f(self):\n    return self.recipe.seed + recipe.lr\n", "x") == [
        "x:2: reads recipe.seed", "x:2: reads recipe.lr"]
