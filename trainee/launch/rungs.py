"""The spec a ``run.screen`` round runs with: its rung's budget as the value of the budget
argument and, for a promoted round with ``run.screen.resume``, that argument with the
folders of the round it continues from (``{from_outputs_dir}``, ``{from_round_dir}``)."""

from __future__ import annotations

import msgspec

from trainee.launch.layout import SessionLayout
from trainee.spec import ProjectSpec, expand
from trainee.spec.files import ArgSpec

__all__ = ["spec_at_rung"]


def spec_at_rung(
    spec: ProjectSpec, rung: int, promoted_from: int | None, session: SessionLayout
) -> ProjectSpec:
    """``spec`` for a round of rung ``rung`` (1 the lowest budget) promoted from round
    ``promoted_from`` (None: a new candidate, the baseline); ``spec`` itself without
    ``run.screen`` or for a round without a rung (0)."""
    screen = spec.run.screen
    if screen is None or not 1 <= rung <= len(screen.rungs):
        return spec
    budget = screen.rungs[rung - 1]

    def with_budget(args: tuple[ArgSpec, ...]) -> tuple[ArgSpec, ...]:
        return tuple(
            ArgSpec(flag=a.flag, value=budget) if a.flag == screen.budget else a for a in args
        )

    fixed = with_budget(spec.run.fixed_args)
    if screen.resume is not None and promoted_from is not None:
        source = session.round(promoted_from)
        value = screen.resume.value
        if isinstance(value, str):
            value = expand(
                value, {"from_outputs_dir": str(source.outputs), "from_round_dir": str(source.dir)}
            )
        fixed = (*fixed, ArgSpec(flag=screen.resume.flag, value=value))
    return msgspec.structs.replace(
        spec,
        run=msgspec.structs.replace(spec.run, fixed_args=fixed),
        launch=msgspec.structs.replace(spec.launch, args=with_budget(spec.launch.args)),
    )
