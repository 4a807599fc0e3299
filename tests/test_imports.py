"""The one-way house: imports run kernels <- services <- faults <- incidents <- sandbox, and never back.

`services/stack/` (the stack's control layer) is part of `services`, so `faults` and everything
above it may use it and it may use nothing above. `dashboards` builds from `services`' metric
names and stands beside `faults`. A project import inside a function is allowed only where a
comment (on its line, the line above, or a module-level `# Lazy imports:` note) says why: an
optional dependency, a process boundary, a start-up cost the CLI must not pay.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"kernels": 0, "services": 1, "dashboards": 2, "faults": 2, "incidents": 3, "sandbox": 4}
LAZY_NOTE = "# Lazy imports:"


def modules() -> list[Path]:
    return sorted(p for pkg in LAYERS for p in (ROOT / pkg).rglob("*.py"))


def project_imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import of a project package."""
    tree = ast.parse(path.read_text())
    in_function = {id(n) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for n in ast.walk(fn) if n is not fn}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [(name, node.lineno, id(node) in in_function) for name in names if name.split(".")[0] in LAYERS]
    return found


def test_no_import_runs_against_the_layer_order():
    upward = []
    for path in modules():
        own = path.relative_to(ROOT).parts[0]
        for name, line, _ in project_imports(path):
            if LAYERS[name.split(".")[0]] > LAYERS[own]:
                upward.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert upward == []


def test_the_stack_layer_imports_only_services():
    outside = [f"{p.relative_to(ROOT)}:{line} imports {name}" for p in (ROOT / "services" / "stack").rglob("*.py")
               for name, line, _ in project_imports(p) if name.split(".")[0] != "services"]
    assert outside == []


def test_a_project_import_inside_a_function_says_why():
    unexplained = []
    for path in modules():
        lines = path.read_text().splitlines()
        noted = any(line.startswith(LAZY_NOTE) for line in lines)
        for name, line, inside in project_imports(path):
            said = "#" in lines[line - 1] or lines[line - 2].strip().startswith("#")
            if inside and not (noted or said):
                unexplained.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert unexplained == []


def test_the_checks_see_an_upward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from sandbox.cli import app\n")
    assert project_imports(bad) == [("sandbox.cli", 2, True)]


def test_prometheus_is_read_through_its_clients_public_methods():
    """PrometheusClient._get is its own: everyone else asks query, alerts, rule_groups, label_values..."""
    private = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr == "_get"
                    and not (isinstance(node.value, ast.Name) and node.value.id == "self")):
                private.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert private == []
