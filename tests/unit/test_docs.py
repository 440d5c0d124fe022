"""README and docs stay true: the CLI reference, the configuration tables, docs/api.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import msgspec

from trainee.cli import COMMANDS, build_parser
from trainee.spec import files

REPO = Path(__file__).resolve().parents[2]

SECTIONS: dict[str, type[msgspec.Struct]] = {
    "top level": files.ProjectFileSpec,
    "data[]": files.DataSpec,
    "launch": files.LaunchSpec,
    "run": files.RunSpec,
    "run.limits": files.LimitsSpec,
    "run.prune": files.PruneSpec,
    "run.noise": files.NoiseSpec,
    "run.screen": files.ScreenSpec,
    "output": files.OutputSpec,
    "metrics": files.MetricsSpec,
    "metrics.specs[]": files.MetricSpec,
    "advanced": files.AdvancedSpec,
    "advanced.backend": files.BackendSpec,
    "llm": files.LlmBudgetSpec,
    "decision": files.DecisionSpec,
    "integrations": files.IntegrationsSpec,
    "integrations.mlflow": files.MlflowSpec,
    "integrations.wandb": files.WandbSpec,
    "integrations.notify": files.NotifySpec,
    "tuning.yaml": files.TuningFileSpec,
    "params[]": files.ParamSpec,
}


def _tables(text: str) -> dict[str, list[str]]:
    """Heading -> the backquoted field names in the first column of its table."""
    out: dict[str, list[str]] = {}
    heading = ""
    for line in text.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            continue
        m = re.match(r"\| `([a-z_]+)` \|", line)
        if m and heading:
            out.setdefault(heading, []).append(m.group(1))
    return out


def test_configuration_doc_lists_every_field_and_no_other() -> None:
    tables = _tables((REPO / "docs" / "configuration.md").read_text())
    for heading, struct in SECTIONS.items():
        assert heading in tables, f"docs/configuration.md has no table for {heading}"
        assert tables[heading] == list(struct.__struct_fields__), heading


def test_readme_cli_reference_matches_the_parser() -> None:
    readme = (REPO / "README.md").read_text()
    block = readme.split("## CLI reference", 1)[1].split("```", 2)[1]
    documented = {line.split()[1] for line in block.splitlines() if line.startswith("trainee ")}
    assert documented == set(COMMANDS), documented ^ set(COMMANDS)
    parser = build_parser()
    sub = next(
        a for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction)
    )
    for line in block.splitlines():
        if not line.startswith("trainee "):
            continue
        name = line.split()[1]
        known = {opt for action in sub.choices[name]._actions for opt in action.option_strings}
        for flag in re.findall(r"--[a-z][a-z-]*", line):
            assert flag in known, f"README documents {flag} for trainee {name}"


def test_readme_starts_with_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text()
    first_block = readme.split("```", 2)[1]
    commands = [ln.split("#")[0].strip() for ln in first_block.strip().splitlines()]
    assert commands[:2] == ["make demo", "make test"]


def test_api_doc_is_current() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "docs" / "gen_api.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def test_the_run_prune_worked_example_loads(tmp_path: Path) -> None:
    import yaml  # type: ignore[import-untyped]

    from trainee.spec import load_project

    text = (REPO / "docs" / "configuration.md").read_text()
    block = text.split("Worked example: a trainer printing")[1].split("```yaml")[1]
    doc = yaml.safe_load(block.split("```")[0])
    doc.update(version=1, launch={"command": ["python", "train.py"]})
    (tmp_path / ".trainee").mkdir()
    (tmp_path / "train.py").write_text("")
    (tmp_path / ".trainee" / "project.yaml").write_text(yaml.safe_dump(doc))
    prune = load_project(tmp_path).run.prune
    assert prune is not None
    assert [type(r).__name__ for r in prune.rules] == [
        "ThresholdRule",
        "PatienceRule",
        "MedianRule",
        "HalvingRule",
    ]
