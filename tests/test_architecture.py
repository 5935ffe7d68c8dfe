"""The import rules of docs/architecture.md hold in the code: each part imports only what its row
allows, and no module imports itself back through others."""

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"


def allowed_imports() -> dict[str, set[str] | None]:
    """Part -> the Jev parts it may import (None: any), read from the doc's table."""
    rules: dict[str, set[str] | None] = {}
    for line in DOC.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not re.fullmatch(r"`jev/[\w./]*`", cells[0]):
            continue
        path = cells[0].strip("`").removesuffix("/").removesuffix(".py")
        part = path.replace("/", ".").removesuffix(".__init__")
        rules[part] = None if cells[2] == "(any)" else set(re.findall(r"`(jev[\w.]*)`", cells[2]))
    return rules


RULES = allowed_imports()


def modules() -> dict[str, Path]:
    found = {}
    for file in (ROOT / "jev").rglob("*.py"):
        name = ".".join(file.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        found[name] = file
    return found


def part_of(module: str) -> str:
    """`jev.decide.decider` -> `jev.decide`; `jev.ragged` -> itself."""
    parts = module.split(".")
    return ".".join(parts[:2])


def imports(file: Path) -> list[tuple[str, int]]:
    """Every Jev module `file` imports, anywhere in it (deferred imports count), with its line."""
    found = []
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.module, node.lineno)] + [(f"{node.module}.{a.name}", node.lineno) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
    return [(name, line) for name, line in found if name == "jev" or name.startswith("jev.")]


def test_the_table_names_every_part_of_the_code() -> None:
    parts = {part_of(name) for name in modules()}
    assert parts == set(RULES), f"parts without a row: {parts - set(RULES)}; rows without code: {set(RULES) - parts}"


@pytest.mark.parametrize("part", sorted(RULES))
def test_a_part_imports_only_what_its_row_allows(part: str) -> None:
    allowed = RULES[part]
    if allowed is None:
        return
    known = modules()
    wrong = []
    for name, file in known.items():
        if part_of(name) != part:
            continue
        for target, line in imports(file):
            other = part_of(target) if target != "jev" else "jev"
            if other != part and other not in allowed and (target in known or other in RULES):
                wrong.append(f"{file.relative_to(ROOT)}:{line} imports {target}")
    assert not wrong, f"{part} may import {sorted(allowed) or 'no Jev part'}:\n" + "\n".join(wrong)


def test_no_import_cycle_between_modules() -> None:
    known = modules()

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = defaultdict(set)
    for name, file in known.items():
        for target, _ in imports(file):
            resolved = resolve(target)
            if resolved and resolved != name and resolved != "jev":
                graph[name].add(resolved)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt) :], nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for name in sorted(known):
        if name not in state:
            visit(name)


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    """The rule check is not vacuous: an upward import in a module is found."""
    file = tmp_path / "upward.py"
    file.write_text("def f():\n    from jev.train.lm import LMSettings\n")
    assert ("jev.train.lm", 2) in imports(file)
    assert "jev.train" not in RULES["jev.generate"] and "jev.serve" not in RULES["jev.client"]
