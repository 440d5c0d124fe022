"""The metric specs discovery proposes read exactly what the fixture scripts print when
they really run (issue 15 item 4): every proposed pattern matches, and the primary
metric's final value is the last validation number of the output."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainee.discovery.metrics import propose_metrics
from trainee.discovery.scan import scan_python_file
from trainee.metrics.extract import Extractor

REPO = Path(__file__).resolve().parents[2]

CASES = [
    # project folder, arguments, primary metric, a regex of our own for its last value
    ("tests/projects/nanogpt_style", ["config/train_tiny.py"], "val_loss", r"val loss (\S+)"),
    ("tests/projects/charlm", ["--epochs", "2"], "val_loss", r"val loss (\S+)"),
    ("tests/projects/keras_style", [], "val_loss", r"val_loss: (\S+)"),
    ("tests/projects/hf_style", [], "eval_loss", r"'eval_loss': ([0-9.]+)"),
    ("examples/mlp-flags", ["--epochs", "3"], "val_loss", r"val_loss=(\S+)"),
]


@pytest.mark.parametrize(("folder", "args", "primary", "last"), CASES)
def test_proposed_specs_read_a_real_run(
    tmp_path: Path, folder: str, args: list[str], primary: str, last: str
) -> None:
    root = tmp_path / "p"
    shutil.copytree(REPO / folder, root, ignore=shutil.ignore_patterns(".trainee"))
    report = propose_metrics(root, scan_python_file(root, "train.py"))
    assert report.primary is not None and report.primary.name == primary
    out = subprocess.run(
        [sys.executable, "train.py", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    specs = [p.to_spec(required=i == 0) for i, p in enumerate(report.proposals)]
    extractor = Extractor(specs, placeholders={}, project_root=str(root))
    extractor.feed_output(out)
    result = extractor.result()
    assert result.missing_required == [] and result.primary == primary
    assert set(result.finals) >= {p.name for p in report.proposals}, (report.proposals, out)
    assert result.finals[primary] == float(re.findall(last, out)[-1])


def test_a_summary_csv_column_is_read_below_the_outputs_folder(tmp_path: Path) -> None:
    root = tmp_path / "p"
    shutil.copytree(REPO / "tests" / "projects" / "timm_style", root)
    report = propose_metrics(root, scan_python_file(root, "train.py"))
    assert [(p.name, p.source, p.path) for p in report.proposals] == [
        ("eval_loss", "csv", "{outputs_dir}/**/summary.csv"),
        ("eval_top1", "csv", "{outputs_dir}/**/summary.csv"),
    ]
    outputs = tmp_path / "outputs"  # what output.flag --output receives in a round
    subprocess.run(
        [sys.executable, "train.py", "--output", str(outputs)], cwd=root, check=True, timeout=120
    )
    specs = [p.to_spec(required=i == 0) for i, p in enumerate(report.proposals)]
    extractor = Extractor(specs, placeholders={"outputs_dir": str(outputs)}, project_root=str(root))
    extractor.read_files()
    finals = extractor.result().finals
    rows = (outputs / "run" / "summary.csv").read_text().splitlines()
    last = dict(zip(rows[0].split(","), rows[-1].split(","), strict=True))
    assert finals == {"eval_loss": float(last["eval_loss"]), "eval_top1": float(last["eval_top1"])}
