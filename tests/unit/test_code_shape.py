"""The shape issue 17 set for the session package (and the policies that moved out of
it): small functions, a runner that keeps only the step loop. Measured with ``ast`` on the source (a def's lines, decorators and
docstring included; a nested def counts in its own right and in the one around it)."""

from __future__ import annotations

import ast
from pathlib import Path

import trainee.policies
import trainee.session

SESSION = Path(trainee.session.__file__).parent
PACKAGES = (SESSION, Path(trainee.policies.__file__).parent)
MAX_FUNCTION_LINES = 80
MAX_RUNNER_LINES = 650


def _functions(path: Path) -> list[tuple[str, int, int]]:
    """(qualified name, first line, line count) of every def in ``path``."""
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    assert child.end_lineno is not None
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    found.append((name, first, child.end_lineno - first + 1))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(), filename=str(path)), "")
    return found


def test_no_function_in_the_session_package_is_over_80_lines() -> None:
    files = sorted(path for package in PACKAGES for path in package.rglob("*.py"))
    assert files
    long = [
        f"{path.relative_to(SESSION.parent.parent)}:{line} {name}: {count} lines"
        for path in files
        for name, line, count in _functions(path)
        if count > MAX_FUNCTION_LINES
    ]
    assert not long, "split these:\n" + "\n".join(long)


def test_the_runner_keeps_only_the_step_loop() -> None:
    lines = len((SESSION / "runner.py").read_text().splitlines())
    assert lines < MAX_RUNNER_LINES, f"trainee/session/runner.py has {lines} lines"


def test_the_measure_sees_a_long_nested_function(tmp_path: Path) -> None:
    body = "".join(f"            x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    path = tmp_path / "m.py"
    path.write_text(f"class A:\n    @staticmethod\n    def f():\n        def g():\n{body}")
    measured = {name: count for name, _, count in _functions(path)}
    assert measured["A.f"] == MAX_FUNCTION_LINES + 3  # its decorator, its def, g's def
    assert measured["A.f.g"] == MAX_FUNCTION_LINES + 1
