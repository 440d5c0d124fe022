"""Files of the tiny test projects that several test folders write the same way."""

from __future__ import annotations

VAL_LOSS_METRICS_YAML = """\
metrics:
  specs:
    - name: val_loss
      source: stdout_regex
      key_or_pattern: 'final val_loss=(?P<value>-?\\d+(?:\\.\\d+)?)'
      goal: min
"""
"""project.yaml's ``metrics`` section of the tiny test projects: the last
``final val_loss=<number>`` line on stdout, lower is better (a spec's own keys, such as
``required``, may follow)."""

_LAUNCH_TO_END = (
    """\
launch:
  command: [python, train.py]
run:
  max_rounds: 3
  timeout_minutes: 5
"""
    + VAL_LOSS_METRICS_YAML
    + """\
      required: true
advanced:
  security_mode: unsafe
"""
)

PROJECT_YAML = "version: 1\n" + _LAUNCH_TO_END
"""A tiny project's project.yaml: ``python train.py``, three rounds of at most 5 minutes,
val_loss (required) from stdout, unsafe mode (tests/corpus)."""

HOLD_PROJECT_YAML = "version: 1\ndata:\n  - path: data\n    flag: --data-root\n" + _LAUNCH_TO_END
""":data:`PROJECT_YAML` with a ``data`` folder passed as ``--data-root``: the hold projects
of tests/e2e/test_resume.py and tests/cluster/project.py."""

LR_TUNING_YAML = """\
version: 1
params:
  - name: lr
    flag: --lr
    type: float
    default: 0.1
    min_value: 0.001
    max_value: 1.0
"""
"""One float ``lr`` in [0.001, 1.0], 0.1 by default, passed as ``--lr``: the tuning.yaml of
the tiny test projects."""
