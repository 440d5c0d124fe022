"""No status or stop-reason literal in trainee/**/*.py outside trainee/states.py.

A literal is a string constant of the Python syntax tree whose whole value is a value of
RoundStatus, SessionStatus or StopReason, so words in docstrings, comments and longer
strings do not count. Four values are also API field names (``running``, ``stopped``,
``error``, ``max_rounds``): as a mapping key (``d["error"]``, ``d.get("running")``,
``{"stopped": True}``, ``"error" in message``) they are names, not states. Everything else
is either written with the enums or listed below with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from trainee.states import RoundStatus, SessionStatus, StopReason

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "trainee"

VALUES = frozenset(s.value for kind in (RoundStatus, SessionStatus, StopReason) for s in kind)
FIELD_NAMES = frozenset({"running", "stopped", "error", "max_rounds"})
"""Values that are also the names of API fields: allowed where a mapping key goes."""

EXCLUDED = {
    "trainee/states.py": "the one place the values are spelled",
    "trainee/shim.py": (
        "the round monitor is started as a file with python -I and imports nothing of "
        "trainee; it writes exit records (timed_out / stopped flags), never statuses"
    ),
}

ALLOWED: dict[tuple[str, str], str] = {
    # -- error kinds (the error table), not stop reasons
    ("trainee/errors.py", 'kind: ClassVar[str] = "error"'): "the base error kind",
    ("trainee/errors.py", 'kind = "invalid_decision"'): "InvalidDecision's error kind",
    ("trainee/llm/client.py", '"other": "error",'): "a provider failure kind",
    # -- other vocabularies that share a word
    ("trainee/daemon/main.py", 'log.info("stopped")'): "a log line of the daemon",
    ("trainee/spec/yamlio.py", 'warnings.simplefilter("error", YAMLWarning)'): (
        "the warnings module's action name"
    ),
    ("trainee/discovery/constraints.py", 'and s.value.func.attr == "error"'): (
        "argparse's parser.error() in the user's script"
    ),
    ("trainee/spec/goals.py", '"error",'): "a metric-name word meaning goal min",
    (
        "trainee/research/state.py",
        'HELD, FAILED, NOT_CHECKABLE = "held", "failed", "not checkable"',
    ): ("what became of a hypothesis"),
    ("trainee/store/export.py", 'return "failed"'): "the report's 'repaired' column",
    ("trainee/api/openapi.py", '"required": ["error"],'): "a JSON schema property name",
    (
        "trainee/cli/commands/session.py",
        'for key in ("security_mode", "max_rounds", "policy", "resume"):',
    ): ("request field names"),
    # -- the launch backends' own vocabularies (owned by the launch layer)
    ("trainee/launch/backends/base.py", 'RUNNING = "running"'): "JobState, an engine's job state",
    (
        "trainee/launch/backends/base.py",
        'async def cancel(self, ref: JobRef, job: RoundJob, *, reason: str = "stopped") -> None:',
    ): ("the cancel request's reason in the control file (stopped, timed_out, lost)"),
    ("trainee/launch/backends/base.py", 'await cancel("timed_out")'): "a cancel request's reason",
    (
        "trainee/launch/backends/local.py",
        'async def cancel(self, ref: JobRef, job: RoundJob, *, reason: str = "stopped") -> None:',
    ): ("a cancel request's reason"),
    (
        "trainee/launch/backends/ray.py",
        'async def cancel(self, ref: JobRef, job: RoundJob, *, reason: str = "stopped") -> None:',
    ): ("a cancel request's reason"),
    (
        "trainee/launch/backends/slurm.py",
        'async def cancel(self, ref: JobRef, job: RoundJob, *, reason: str = "stopped") -> None:',
    ): ("a cancel request's reason"),
    (
        "trainee/launch/backends/ray.py",
        'timed_out=reason == "timed_out",',
    ): "a cancel request's reason",
    ("trainee/launch/backends/ray.py", 'stopped=reason == "stopped",'): "a cancel request's reason",
    (
        "trainee/launch/backends/slurm.py",
        'stopped=reason == "stopped",',
    ): "a cancel request's reason",
    (
        "trainee/launch/backends/slurm.py",
        'timed_out=reason == "timed_out" or (detail == "timeout" and reason is None),',
    ): ("a cancel request's reason"),
    (
        "trainee/launch/backends/ray.py",
        'return JobState.QUEUED, "pending", info',
    ): "Ray's job status, lowercased",
    (
        "trainee/launch/backends/ray.py",
        'return JobState.RUNNING, "running", info',
    ): "Ray's job status, lowercased",
    (
        "trainee/launch/backends/ray.py",
        'return JobState.CANCELLED, "stopped", info',
    ): "Ray's job status, lowercased",
    (
        "trainee/launch/backends/ray.py",
        'elif detail == "failed" and code is None:',
    ): "Ray's job status, lowercased",
    (
        "trainee/launch/backends/slurm.py",
        'if detail in ("completed", "failed") and rc.isdigit():',
    ): ("Slurm's job state, lowercased"),
    (
        "trainee/launch/backends/slurm.py",
        'elif detail not in ("completed", "failed", "cancelled", "timeout", "ended"):',
    ): ("Slurm's job state, lowercased"),
}
"""(file, the stripped source line) -> why its literal is not a status or stop reason."""


def _key_position(node: ast.Constant, parent: ast.AST | None) -> bool:
    """``node`` names a field: a dict key, a subscript, ``.get/.pop/.setdefault``'s key or
    the left side of ``in`` a mapping."""
    if isinstance(parent, ast.Dict):
        return any(k is node for k in parent.keys)
    if isinstance(parent, ast.Subscript):
        return parent.slice is node
    if isinstance(parent, ast.Call):
        return (
            isinstance(parent.func, ast.Attribute)
            and parent.func.attr in {"get", "pop", "setdefault"}
            and bool(parent.args)
            and parent.args[0] is node
        )
    if isinstance(parent, ast.Compare):
        return (
            parent.left is node
            and isinstance(parent.ops[0], ast.In | ast.NotIn)
            and not isinstance(parent.comparators[0], ast.Tuple | ast.List | ast.Set)
        )
    return False


def literals(source: str) -> list[tuple[int, str, str]]:
    """(line, value, stripped line) of each status or stop-reason literal in ``source``."""
    tree = ast.parse(source)
    lines = source.splitlines()
    parents: dict[int, ast.AST] = {}
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            docstrings.add(id(body[0].value))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            docstrings.add(id(node.value))  # attribute docstrings and bare strings
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if node.value not in VALUES or id(node) in docstrings:
            continue
        if node.value in FIELD_NAMES and _key_position(node, parents.get(id(node))):
            continue
        found.append((node.lineno, node.value, lines[node.lineno - 1].strip()))
    return sorted(found)


def _scan() -> tuple[list[str], set[tuple[str, str]]]:
    bad: list[str] = []
    used: set[tuple[str, str]] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in EXCLUDED:
            continue
        for line, value, text in literals(path.read_text(encoding="utf-8")):
            if (rel, text) in ALLOWED:
                used.add((rel, text))
            else:
                bad.append(f"{rel}:{line}: {value!r} in: {text}")
    return bad, used


def test_no_status_or_stop_reason_literal_outside_states() -> None:
    bad, used = _scan()
    assert not bad, (
        "write these with trainee.states (RoundStatus, SessionStatus, StopReason, "
        "ROUND_FINISHED, SESSION_ENDED), or add a reviewed entry to ALLOWED:\n" + "\n".join(bad)
    )
    stale = sorted(set(ALLOWED) - used)
    assert not stale, f"ALLOWED entries that match nothing any more (remove them): {stale}"


def test_the_exclusions_exist_or_are_announced() -> None:
    for rel, reason in EXCLUDED.items():
        assert (ROOT / rel).is_file() or reason == "removed when the round helper lands", rel


@pytest.mark.parametrize(
    "snippet",
    [
        'if rec.status == "running":\n    pass\n',
        'done = rec.status in ("failed", "timed_out")\n',
        'WORDS = {"finished": "done", "stopped": "was stopped"}\n',
        'EXIT = {"provider_failed": 9}\n',
        'control.request_stop("user_stop")\n',
        'rec = Record(status="pending")\n',
        'x = "completed_without_metrics"\n',
        'class A:\n    """Doc."""\n    status: str = "completed"\n',
    ],
)
def test_the_checker_finds_a_literal(snippet: str) -> None:
    assert literals(snippet), snippet


@pytest.mark.parametrize(
    "snippet",
    [
        '"""A module whose rounds are running."""\n',
        'def f():\n    """running"""\n',
        'X = 1\n"""running"""\n',
        'x = 1  # "running"\n',
        'msg = "the round is running"\n',
        'print(state["running"], d.get("error"), d.pop("max_rounds", None))\n',
        'out = {"running": True, "stopped": False}\n',
        'if "error" in message:\n    pass\n',
        "status = RoundStatus.RUNNING\n",
    ],
)
def test_the_checker_ignores_prose_and_field_names(snippet: str) -> None:
    assert literals(snippet) == [], snippet


def test_a_field_name_value_in_a_status_position_is_still_found() -> None:
    found = literals('if rec.status in ("running", "pending"):\n    pass\nd = {"error": "error"}\n')
    assert [(line, value) for line, value, _ in found] == [
        (1, "pending"),
        (1, "running"),
        (3, "error"),
    ]
