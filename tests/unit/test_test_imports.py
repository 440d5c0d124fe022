"""No test module imports another test module: what tests share lives in tests/support,
a conftest, tests/fakes or a folder's helper module (tests/faults/helpers.py, ...).

A test module (``test_*.py``) imported by another one is a helper library nobody can
find, and its fixtures silently shadow conftest's where it is imported. This reads
every Python file under tests/ and bench/ and lists each import that names a module
whose last part starts with ``test_``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.daemon import REPO


def _is_test_module(dotted: str) -> bool:
    return dotted.startswith("tests.") and dotted.rsplit(".", 1)[-1].startswith("test_")


def imports_of_test_modules(source: str, package: str = "tests") -> list[tuple[int, str]]:
    """(line, module) of each import of a test module in Python ``source``; ``package``
    is the source's own package, for relative imports."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if _is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            if _is_test_module(base):
                found.append((node.lineno, base))
            found += [
                (node.lineno, f"{base}.{a.name}")
                for a in node.names
                if _is_test_module(f"{base}.{a.name}")
            ]
    return sorted(found)


def _files() -> list[Path]:
    return sorted(
        p
        for folder in ("tests", "bench")
        for p in (REPO / folder).rglob("*.py")
        if "tests/projects" not in p.as_posix() and "tests/fixtures" not in p.as_posix()
    )


def test_no_test_module_imports_another_test_module() -> None:
    files = _files()
    assert len(files) > 100, "the walk found too few files to be the test tree"
    offenders = []
    for path in files:
        rel = path.relative_to(REPO)
        package = ".".join(rel.parent.parts)
        for line, module in imports_of_test_modules(path.read_text(), package):
            offenders.append(f"{rel}:{line} imports {module}")
    assert offenders == [], (
        "move what is shared to tests/support (helpers) or a conftest (fixtures):\n"
        + "\n".join(offenders)
    )


def test_the_check_catches_each_form() -> None:
    source = (
        "from tests.e2e.test_loop import SESSION\n"
        "import tests.e2e.test_mcp\n"
        "from tests.e2e import test_webui\n"
        "from .test_resume import PROJECT_YAML\n"
        "def f():\n"
        "    from tests.unit.test_docs import x\n"
        "from tests.support.loop import SESSION\n"
        "from tests.faults.helpers import Node\n"
        "from tests.unit.spec.conftest import write\n"
        "from tests.e2e.testing_tools import y\n"
    )
    assert imports_of_test_modules(source, "tests.e2e") == [
        (1, "tests.e2e.test_loop"),
        (2, "tests.e2e.test_mcp"),
        (3, "tests.e2e.test_webui"),
        (4, "tests.e2e.test_resume"),
        (6, "tests.unit.test_docs"),
    ]
