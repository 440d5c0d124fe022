"""The checks of ``run.screen`` that span fields: the budget is a constant argument of the
project whose value is the full budget, the rungs increase up to it, the resume argument
is new and uses only known variables. Pure; :mod:`trainee.spec.compile` turns a problem
into a ConfigError naming the field."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from trainee.spec.files import ArgSpec, FieldPath, ProjectFileSpec, TuningFileSpec
from trainee.spec.placeholders import ARG_PLACEHOLDERS, placeholders_in

__all__ = ["RESUME_PLACEHOLDERS", "budget_arg", "check_screen"]

RESUME_PLACEHOLDERS: tuple[str, ...] = ("from_outputs_dir", "from_round_dir")
"""The variables of ``run.screen.resume.value`` besides the usual ones: the outputs
folder and the folder of the round a promoted round continues from."""

Problem = tuple[FieldPath, str]


def budget_arg(project: ProjectFileSpec) -> tuple[str, int, ArgSpec] | None:
    """Where the budget argument is: (``run.fixed_args`` or ``launch.args``, its index,
    the argument); None when neither has it."""
    screen = project.run.screen
    if screen is None:
        return None
    for where, args in (("fixed_args", project.run.fixed_args), ("args", project.launch.args)):
        for i, arg in enumerate(args):
            if arg.flag == screen.budget:
                return where, i, arg
    return None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_screen(project: ProjectFileSpec, tuning: TuningFileSpec) -> Problem | None:
    """The first problem of ``run.screen`` (field path, reason), or None."""
    screen = project.run.screen
    if screen is None:
        return None
    base: FieldPath = ("run", "screen")
    rungs = list(screen.rungs)
    if any(not math.isfinite(r) or r <= 0 for r in rungs):
        return (*base, "rungs"), f"must be finite budgets above 0, got {rungs}"
    if any(b <= a for a, b in itertools.pairwise(rungs)):
        return (*base, "rungs"), f"must be increasing budgets, got {rungs}"
    for p in tuning.params:
        if screen.budget in (p.name, p.flag, p.override):
            return (
                (*base, "budget"),
                f"'{screen.budget}' is the tuning.yaml param '{p.name}': the budget must be a "
                "constant argument the policy does not tune; move it to run.fixed_args with "
                f"the full budget as its value (e.g. {{flag: {p.flag or p.override or p.name}, "
                f"value: {rungs[-1]:g}}})",
            )
    found = budget_arg(project)
    if found is None:
        flags = [a.flag for a in (*project.run.fixed_args, *project.launch.args)]
        known = ", ".join(flags) if flags else "none"
        return (
            (*base, "budget"),
            f"'{screen.budget}' is not the flag of a run.fixed_args or launch.args entry "
            f"(constant flags: {known}); add it there with the full budget as its value",
        )
    where, i, arg = found
    value_path: FieldPath = ("run", "fixed_args", i, "value")
    if where == "args":
        value_path = ("launch", "args", i, "value")
    if not _is_number(arg.value):
        return value_path, (
            f"the budget argument {arg.flag} (run.screen.budget) needs a number as its value "
            f"(the full budget), got {arg.value!r}"
        )
    assert isinstance(arg.value, int | float)
    if not math.isclose(float(arg.value), float(rungs[-1])):
        return (*base, "rungs"), (
            f"the last rung is the full budget and must equal the value of {arg.flag} "
            f"({arg.value:g}), got {rungs[-1]:g}: the baseline runs at the full budget"
        )
    if isinstance(arg.value, int) and any(
        isinstance(r, float) and not r.is_integer() for r in rungs
    ):
        return (*base, "rungs"), (
            f"{arg.flag} takes a whole number ({arg.value}); the rungs must be whole numbers "
            f"too, got {rungs}"
        )
    resume = screen.resume
    if resume is not None:
        problem = _check_resume(project, tuning, resume)
        if problem is not None:
            return problem
    return None


def _check_resume(
    project: ProjectFileSpec, tuning: TuningFileSpec, resume: ArgSpec
) -> Problem | None:
    base: FieldPath = ("run", "screen", "resume")
    screen = project.run.screen
    assert screen is not None
    taken: Sequence[str | None] = [
        screen.budget,
        project.output.flag,
        *(a.flag for a in (*project.run.fixed_args, *project.launch.args)),
        *(f for p in tuning.params for f in (p.flag, p.override)),
    ]
    if resume.flag in taken:
        return (*base, "flag"), (
            f"{resume.flag} is already passed to every round (a constant argument, the output "
            "flag, the budget or a tunable); the resume flag must be one of its own"
        )
    if isinstance(resume.value, str):
        allowed = {*ARG_PLACEHOLDERS, *RESUME_PLACEHOLDERS}
        unknown = [n for n in placeholders_in(resume.value) if n not in allowed]
        if unknown:
            names = ", ".join("{" + n + "}" for n in sorted(allowed))
            return (*base, "value"), (
                f"unknown variable {{{unknown[0]}}}; the variables are {names}"
            )
    return None
