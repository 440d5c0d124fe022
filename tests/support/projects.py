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

HOLD_PROJECT_YAML = (
    """\
version: 1
data:
  - path: data
    flag: --data-root
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
"""The project.yaml of the hold projects (tests/e2e/test_resume.py, tests/cluster/project.py):
``python train.py --data-root data``, three rounds, val_loss from stdout."""

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
