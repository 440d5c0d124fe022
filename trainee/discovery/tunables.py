"""Tunable-parameter suggestions from the baseline config, Hydra configs and entrypoint options.

Sources: the keys of ``launch.baseline_config`` (``config_path`` params), the primary
Hydra config of a ``@hydra.main`` entrypoint when there is no baseline config
(``override`` params, plus config-group choices), and the options of the entrypoint
that ``launch.command`` runs (``flag`` params).

Never suggested: ``output.config_path`` and its subtree; anything set by
``launch.args``, ``run.fixed_args`` or ``data[].flag`` (same flag, same name, or an
overlapping override key); the config option itself; training budgets (epochs, max
steps...); names about seeds, outputs, paths, logging, checkpoints, devices, workers,
ports, ranks, tracking, evaluation schedules and runtime numerics; path-like or free
strings; lists other than short numeric ones; null values.

Bounds, from the default ``x`` (documented in each suggestion's ``reason``):

- learning rates, eps, temperatures, scale-like weights (``*_weight``, ``*_coef``) and
  other positive floats: ``x/10 .. x*10``, log scale;
- weight decay / L2: ``x/10 .. x*10`` log when ``x > 0``; ``0 .. 0.1`` linear when 0;
- gradient clipping: ``x/10 .. x*10`` log when ``x > 0``; ``0 .. 10`` when 0 (off);
- probabilities (dropout, label smoothing, drop path): ``0 .. 0.5`` (``0 .. 0.99`` when
  ``x > 0.5``);
- momentum, betas, EMA decay and decay factors ``>= 0.5``: ``1-(1-x)*10 .. 1-(1-x)/10``
  (``0.9`` -> ``0 .. 0.99``, ``0.999`` -> ``0.99 .. 0.9999``); below 0.5: ``0 .. 0.99``;
- warmup ratios ``0 .. 0.5`` (``0 .. 1`` above 0.25); warmup counts ``0 .. 4x``;
- integer sizes (batch size, hidden width): ``max(1, x//2) .. 2x``, log scale;
  depths, heads and other counts: ``max(1, x//2) .. 2x``, linear;
- a zero default with no known scale gets only ``min_value: 0``; a negative integer
  default (usually "off") is not suggested;
- click ``FloatRange``/``IntRange`` and typer ``min``/``max`` narrow the bounds.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec

from trainee.discovery.limits import is_tied_key
from trainee.discovery.scan import (
    Discovery,
    EntryOption,
    Entrypoint,
    discover,
    entrypoint_for_command,
    is_data_option,
    is_limit_name,
    normalize_name,
)
from trainee.errors import ConfigError, InvalidParams
from trainee.spec import (
    ArgStyle,
    ParamSpec,
    ParamType,
    ProjectFileSpec,
    TuningFileSpec,
    check_project,
    load_project,
    load_project_file,
    load_tuning_file,
    save_project_files,
)
from trainee.spec.wire import TUNABLES_LIMIT

__all__ = [
    "DEFAULT_LIMIT",
    "ApplyResult",
    "ConstraintSuggestion",
    "Excluded",
    "Skipped",
    "Suggestion",
    "SuggestionReport",
    "TunablesResult",
    "apply_suggestions",
    "discover_tunables",
    "suggest_tunables",
    "suggest_tunables_report",
]

DEFAULT_LIMIT = TUNABLES_LIMIT
_MAX_CANDIDATES = 2_000
_NAME_OK = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_PATHLIKE = re.compile(r"(^[.~]?/|/|\\|\.(?:ya?ml|json|toml|txt|csv|pt|pth|ckpt|npz|bin|h5)$)")


class Suggestion(msgspec.Struct, kw_only=True):
    """A proposed tuning.yaml param with the reason it was proposed and its bounds."""

    name: str
    source: Literal["flag", "config", "override"]
    type: Literal["float", "int", "bool", "choice"]
    reason: str
    flag: str | None = None
    config_path: str | None = None
    override: str | None = None
    default: Any = None
    min_value: int | float | None = None
    max_value: int | float | None = None
    choices: list[Any] | None = None
    log: bool = False
    description: str = ""

    def to_param(self) -> ParamSpec:
        """The tuning.yaml entry. Config-backed params carry no default: trainee reads
        the starting value from the baseline config."""
        return ParamSpec(
            name=self.name,
            flag=self.flag,
            config_path=self.config_path,
            override=self.override,
            type=ParamType(self.type),
            default=None if self.source == "config" else self.default,
            min_value=self.min_value,
            max_value=self.max_value,
            choices=tuple(self.choices) if self.choices is not None else None,
            log=self.log,
            description=self.description,
        )


class Excluded(msgspec.Struct, kw_only=True):
    """A candidate that was looked at and left out, and why."""

    key: str
    source: Literal["flag", "config", "override"]
    reason: str


class ConstraintSuggestion(msgspec.Struct, kw_only=True):
    """A tuning.yaml ``constraints:`` entry over param names, and the code that says so."""

    expr: str
    reason: str


class SuggestionReport(msgspec.Struct, kw_only=True):
    suggestions: list[Suggestion]
    excluded: list[Excluded]
    entrypoint: str | None
    baseline_config: str | None
    notes: list[str] = msgspec.field(default_factory=list)
    constraints: list[ConstraintSuggestion] = msgspec.field(default_factory=list)


class Skipped(msgspec.Struct, kw_only=True):
    name: str
    reason: str


class ApplyResult(msgspec.Struct, kw_only=True):
    written: list[str]
    skipped: list[Skipped]
    tuning_file: str
    constraints: list[str] = msgspec.field(default_factory=list)


class TunablesResult(msgspec.Struct, kw_only=True):
    """What ``trainee tunables discover`` shows (and wrote, with ``apply``)."""

    project_root: str
    entrypoint: str | None
    baseline_config: str | None
    suggestions: list[Suggestion]
    excluded: list[Excluded]
    applied: bool = False
    written: list[str] = msgspec.field(default_factory=list)
    skipped: list[Skipped] = msgspec.field(default_factory=list)
    notes: list[str] = msgspec.field(default_factory=list)
    constraints: list[ConstraintSuggestion] = msgspec.field(default_factory=list)


# -- name rules --------------------------------------------------------------------------


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# families in ranking order: (family, exact names, pattern)
_FAMILIES: tuple[tuple[str, frozenset[str], str], ...] = (
    (
        "lr",
        _words("lr learning_rate base_lr max_lr init_lr peak_lr"),
        r"^(?:[a-z0-9]+_)?(?:lr|learning_rate)$|^lr_(?:max|peak|init|base)$",
    ),
    (
        "weight_decay",
        _words("weight_decay wd l2 l2_reg l2_weight l2_lambda"),
        r"^(?:[a-z0-9]+_)?weight_decay$|^(?:lambda_)?l2(?:_[a-z]+)?$",
    ),
    (
        "batch_size",
        _words(
            "batch_size bs micro_batch_size train_batch_size per_device_train_batch_size "
            "global_batch_size"
        ),
        r"^(?:[a-z0-9]+_)?batch_size$",
    ),
    (
        "dropout",
        _words(
            "dropout drop_path drop_path_rate drop_rate attn_drop proj_drop p_drop "
            "attention_dropout hidden_dropout"
        ),
        r"^(?:[a-z0-9]+_)?dropout(?:_[a-z0-9]+)?$|^(?:[a-z]+_)?drop_(?:rate|prob|path)$",
    ),
    (
        "warmup",
        _words(
            "warmup warmup_steps warmup_iters warmup_epochs warmup_ratio lr_warmup_steps "
            "num_warmup_steps warmup_proportion warmup_frac"
        ),
        r"^(?:[a-z]+_)?warmup(?:_[a-z]+)?$",
    ),
    (
        "momentum",
        _words("momentum beta beta1 beta2 beta_1 beta_2 adam_beta1 adam_beta2 ema ema_decay betas"),
        r"^(?:[a-z]+_)?(?:momentum|beta_?[12]|betas|ema_decay)$",
    ),
    (
        "label_smoothing",
        _words("label_smoothing label_smooth smoothing"),
        r"^label_smooth(?:ing)?(?:_[a-z]+)?$",
    ),
    (
        "grad_clip",
        _words(
            "grad_clip clip clip_grad clip_grad_norm max_grad_norm gradient_clip_val "
            "grad_norm_clip clip_norm clip_value"
        ),
        r"^(?:max_)?(?:grad(?:ient)?_)?(?:norm_)?clip(?:_[a-z]+)?$|^max_grad_norm$",
    ),
    (
        "accumulation",
        _words(
            "gradient_accumulation_steps grad_accum grad_accum_steps accumulate_grad_batches "
            "accum_steps accum_iter"
        ),
        r"^(?:gradient_)?accum(?:ulation|ulate)?_[a-z_]+$",
    ),
    ("eps", _words("eps epsilon adam_eps adam_epsilon"), r"^(?:[a-z]+_)?eps(?:ilon)?$"),
    (
        "gamma",
        _words("gamma lr_gamma lr_decay decay_rate decay step_gamma lr_decay_rate"),
        r"^(?:lr_)?(?:gamma|decay(?:_rate|_factor)?)$",
    ),
    ("temperature", _words("temperature temp tau"), r"^(?:[a-z]+_)?temperature$"),
    (
        "size",
        _words(
            "hidden hidden_size hidden_dim width d_model n_embd embed_dim emb_dim dim d_ff "
            "ffn_dim mlp_ratio channels filters units num_hidden n_hidden block_size n_units "
            "hidden_units"
        ),
        r"^(?:n_|num_)?(?:hidden|embd?|embed|channels|filters|units)(?:_(?:size|dim|units))?$",
    ),
    (
        "depth",
        _words(
            "depth layers num_layers n_layers n_layer num_blocks n_head n_heads num_heads heads n_blocks"
        ),
        r"^(?:n_|num_)?(?:layers?|blocks?|heads?)$",
    ),
    (
        "augment",
        _words(
            "augment augmentation aug mixup cutmix mixup_alpha cutmix_alpha random_erase color_jitter"
        ),
        r"^(?:use_)?(?:aug|augment|augmentation|mixup|cutmix)(?:_[a-z]+)?$",
    ),
    (
        "choice",
        _words(
            "optimizer optim scheduler lr_scheduler activation act norm loss init schedule lr_schedule"
        ),
        r"^(?:[a-z]+_)?(?:optimizer|scheduler|activation|schedule)$",
    ),
    (
        "loss_weight",
        _words("alpha lambda lam coef kl_weight ent_coef vf_coef smooth"),
        r"^(?:[a-z0-9]+_)?(?:weight|coef|coeff|lambda|alpha|penalty|reg)$",
    ),
)
_FAMILY_RANK = {f: i for i, (f, _, _) in enumerate(_FAMILIES)}
_FAMILY_RE = [(f, exact, re.compile(p)) for f, exact, p in _FAMILIES]
_FLOAT_FAMILIES = _words(
    "lr weight_decay dropout momentum label_smoothing grad_clip eps temperature loss_weight"
)

_EXCLUDED_TOKENS: dict[str, str] = {}
"""Word of a name -> what it says the name is about (never a training knob)."""
for _topic, _names in (
    ("a random seed", "seed seeds"),
    ("an output location", "output outputs out outdir"),
    ("a path", "dir dirs path paths file files filename root folder dirname"),
    ("logging", "log logs logging logger logdir"),
    ("checkpointing", "save saving ckpt checkpoint checkpoints resume restore"),
    ("hardware placement", "device devices gpu gpus cuda cpu accel accelerator tpu mps"),
    ("knowledge distillation (a teacher model, off unless set up)", "kd distill teacher"),
    ("parallelism", "workers worker threads jobs procs"),
    ("networking", "port host address url addr master"),
    ("distributed setup", "rank world nodes node ddp distributed backend dist"),
    ("experiment tracking", "wandb tensorboard mlflow comet entity tags tag"),
    (
        "a config group of the run's setup (hardware, callbacks, logging, experiments)",
        "trainer callbacks callback experiment experiments hparams_search extras launcher",
    ),
    ("a count that switches a code path on (repeats, splits)", "repeats splits"),
    ("credentials", "auth credential credentials password"),
    (
        "data loading or preprocessing (rounds would see different data)",
        "streaming tokenizer linebreaks preprocessing preprocess",
    ),
    ("diagnostics", "verbose verbosity debug quiet print progress tqdm profile profiler"),
    (
        "evaluation (a fixed measurement, not a training knob)",
        "eval evaluate evaluation val validate valid validation test",
    ),
    ("a logging/evaluation schedule", "interval every freq frequency"),
    (
        "runtime numerics (speed or reproducibility, not the model)",
        "compile amp dtype precision fp16 bf16 half tf32 deterministic benchmark",
    ),
    ("a run budget", "limit time timeout budget deadline hours minutes patience samples"),
    ("runtime housekeeping", "cache download overwrite force dry"),
    ("the dataset choice", "dataset datasets"),
    ("the config file", "config cfg configs"),
):
    _EXCLUDED_TOKENS.update(dict.fromkeys(_names.split(), _topic))
_MODE_TOKENS = _words(
    "sample sampling predict prediction inference infer generate generation export onnx demo "
    "interactive only just visualize visualise plot do"
)
"""Words of a mode switch: what the run does (sample, evaluate only, export), not how it
trains; a round with one set does not train, or does not train the same way."""
_START_TOKENS = _words("from pretrained load init_from")
"""Words of a starting point: resume / init_from / load a checkpoint or pretrained weights."""
_MODE_VALUES = _words(
    "train eval evaluate test predict sample generate inference infer finetune resume scratch"
)
_SHAPE_NAMES = _words(
    "input_size input_dim input_dims in_features in_dim in_channels in_chans num_channels "
    "output_size output_dim out_features out_dim num_classes n_classes nclasses num_labels "
    "n_outputs img_size image_size input_shape vocab_size n_vocab ntokens"
)
"""Sizes fixed by the data (its image size, classes, vocabulary): any other value crashes."""
_EXCLUDED_SECTIONS = _words(
    "extras output outputs logging logger loggers log wandb hydra paths path checkpoint checkpointing "
    "callbacks data dataset datasets eval evaluation env environment distributed system io"
)
_GENERIC_LEAVES = _words("name type kind mode value weight rate id")


def _family(name: str) -> str | None:
    key = normalize_name(name).rsplit(".", 1)[-1]
    for family, exact, pattern in _FAMILY_RE:
        if key in exact or pattern.match(key):
            return family
    return None


def _excluded_name(name: str) -> str | None:
    """Why a name is never tunable, or None."""
    key = normalize_name(name).rsplit(".", 1)[-1]
    family = _family(key)
    if is_limit_name(key):
        if is_tied_key(key):
            return (
                "a schedule length tied to the training budget (warmup, decay length); "
                "pinned with it in run.fixed_args, never tuned"
            )
        return "a training budget (epochs/steps); keep it in run.fixed_args so rounds compare"
    if is_data_option(key):
        return "the data location"
    for family_name, exact, _ in _FAMILY_RE:
        if key in exact and family_name == family:
            return None  # a known hyperparameter name wins over token rules (drop_path)
    tokens = re.split(r"[^a-z0-9]+", key)
    raw = name.rsplit(".", 1)[-1]
    if raw.startswith("_") and raw.endswith("_"):
        return f"'{raw}' is a framework directive (Hydra _target_/_partial_), not a value"
    if key in _SHAPE_NAMES:
        return f"'{key}' is fixed by the data's shape (image size, classes, vocabulary)"
    if re.fullmatch(r"min_(?:epochs?|steps?|iters?|iterations?|time)", key):
        return "a training budget (epochs/steps); keep it in run.fixed_args so rounds compare"
    if key in ("train", "do_train", "skip_train", "test", "run_test", "validate"):
        return f"'{key}' is a mode switch (whether a stage runs at all)"
    if key == "init_from" or any(t in _START_TOKENS for t in tokens):
        return (
            f"'{key}' names where training starts (resume, a checkpoint or pretrained "
            "weights), not a training knob"
        )
    if key in ("mode", "run_mode", "exec_mode", "task") or any(t in _MODE_TOKENS for t in tokens):
        return f"'{key}' is a mode switch (what the run does, e.g. sample or evaluate only)"
    for token in tokens:
        if token in _EXCLUDED_TOKENS:
            return f"'{key}' names {_EXCLUDED_TOKENS[token]}"
    return None


# -- bounds --------------------------------------------------------------------------------


@dataclass
class _Bounds:
    lo: int | float | None
    hi: int | float | None
    log: bool
    why: str


def _round(x: float) -> float:
    """Six significant digits (``0.001 * 10`` is 0.01)."""
    return float(f"{x:.6g}")


_WD_COMMON = (1e-5, 0.1)
"""Weight decays worth trying whatever the default (L2 on Adam 1e-5..1e-3, AdamW 0.01..0.1)."""


def _scaled(d: float, what: str) -> _Bounds:
    return _Bounds(_round(d / 10), _round(d * 10), True, f"{what} -> log scale, bounds x/10..x*10")


def _near_one(d: float, what: str) -> _Bounds:
    if d >= 0.5:
        # round(.., 12) drops float noise: 1-(1-0.9)*10 is 0, not 2.2e-16
        return _Bounds(
            _round(max(0.0, round(1 - (1 - d) * 10, 12))),
            _round(round(1 - (1 - d) / 10, 12)),
            False,
            f"{what} close to 1 -> bounds 1-(1-x)*10..1-(1-x)/10",
        )
    return _Bounds(0.0, 0.99, False, f"{what} -> bounds 0..0.99")


def _float_bounds(family: str | None, d: float | None, leaf: str = "") -> _Bounds:
    if re.search(r"(?:^|_)(?:prob|probability|p|hflip|vflip|flip)$", leaf) and (
        d is None or 0 <= d <= 1
    ):
        return _Bounds(0.0, 1.0, False, "probability name -> bounds 0..1")
    return _float_bounds_of(family, d)


def _float_bounds_of(family: str | None, d: float | None) -> _Bounds:
    if d is None:
        if family == "lr":
            return _Bounds(1e-5, 1.0, True, "learning-rate name, no default -> log scale 1e-5..1")
        if family in ("dropout", "label_smoothing"):
            return _Bounds(0.0, 0.5, False, "probability name, no default -> bounds 0..0.5")
        if family == "momentum":
            return _Bounds(0.0, 0.99, False, "momentum/beta name, no default -> bounds 0..0.99")
        return _Bounds(None, None, False, "no default -> no bounds")
    if family == "lr":
        if d > 0:
            return _scaled(d, "learning-rate name")
        return _Bounds(None, None, False, "learning-rate name but default <= 0 -> no bounds")
    if family == "weight_decay":
        if d > 0:
            b = _scaled(d, "weight-decay name")
            b.lo, b.hi = min(b.lo or d, _WD_COMMON[0]), max(b.hi or d, _WD_COMMON[1])
            b.why += f", widened to the common range {_WD_COMMON[0]:g}..{_WD_COMMON[1]:g}"
            return b
        return _Bounds(0.0, 0.1, False, "weight-decay name, default 0 (off) -> bounds 0..0.1")
    if family in ("dropout", "label_smoothing", "augment") and 0 <= d < 1:
        hi = 0.5 if d <= 0.5 else 0.99
        return _Bounds(0.0, hi, False, f"probability name -> bounds 0..{hi}")
    if family in ("momentum", "gamma") and 0 <= d < 1:
        return _near_one(d, "momentum/decay name")
    if family == "warmup" and 0 <= d < 1:
        hi = 0.5 if d <= 0.25 else 1.0
        return _Bounds(0.0, hi, False, f"warmup ratio -> bounds 0..{hi}")
    if family == "grad_clip":
        if d > 0:
            return _scaled(d, "gradient-clipping name")
        return _Bounds(0.0, 10.0, False, "gradient clipping, default 0 (off) -> bounds 0..10")
    if family == "size" and d > 0:
        return _Bounds(_round(d / 2), _round(d * 2), True, "size name -> log scale, x/2..x*2")
    what = {
        "eps": "epsilon name",
        "temperature": "temperature name",
        "loss_weight": "scale-like weight name",
        "gamma": "decay factor",
    }.get(family or "", "positive number")
    if d > 0:
        return _scaled(d, what)
    if d < 0:
        return _Bounds(_round(d * 10), _round(d / 10), False, "negative number -> x*10..x/10")
    return _Bounds(0.0, None, False, "default 0 with no known scale -> only min_value 0")


def _int_bounds(family: str | None, d: int | None) -> _Bounds | None:
    if d is None:
        return _Bounds(1, None, False, "no default -> min_value 1")
    if d < 0:
        return None
    if family == "warmup":
        if d == 0:
            return _Bounds(0, None, False, "warmup count, default 0 (off) -> min_value 0")
        return _Bounds(0, d * 4, False, "warmup count -> bounds 0..4x")
    if d == 0:
        return _Bounds(0, None, False, "default 0 with no known scale -> only min_value 0")
    lo, hi = max(1, d // 2), max(d * 2, d + 1)
    if family in ("batch_size", "size"):
        return _Bounds(lo, hi, True, f"{family.replace('_', ' ')} name -> log scale, x/2..x*2")
    if family == "accumulation":
        return _Bounds(1, max(d * 4, 8), False, "accumulation steps -> bounds 1..max(4x, 8)")
    return _Bounds(lo, hi, False, "count -> bounds max(1, x/2)..x*2")


def _clamp(b: _Bounds, lo: Any, hi: Any, default: Any) -> _Bounds:
    if isinstance(lo, int | float) and not isinstance(lo, bool):
        b.lo = lo if b.lo is None else max(b.lo, lo)
        b.why += f"; option range min {lo}"
    if isinstance(hi, int | float) and not isinstance(hi, bool):
        b.hi = hi if b.hi is None else min(b.hi, hi)
        b.why += f"; option range max {hi}"
    if isinstance(default, int | float) and not isinstance(default, bool):
        if b.lo is not None and default < b.lo:
            b.lo = default
        if b.hi is not None and default > b.hi:
            b.hi = default
    if b.lo is not None and b.hi is not None and b.lo > b.hi:
        b.lo, b.hi = b.hi, b.lo
    if b.log and (b.lo is None or b.lo <= 0 or (isinstance(default, int | float) and default <= 0)):
        b.log = False
    return b


# -- candidates ---------------------------------------------------------------------------


@dataclass
class _Candidate:
    key: str  # the flag, config path or override key
    source: Literal["flag", "config", "override"]
    leaf: str
    value: Any
    has_value: bool
    order: int
    origin: str  # "argparse option --lr", "configs/base.yaml optimizer.lr"
    description: str = ""
    choices: list[Any] | None = None
    declared: str | None = None  # the option's type, for flags
    option: EntryOption | None = None
    name_hint: str | None = None
    override_prefix: str = ""  # "++" for a key that a group choice may remove or add


@dataclass
class _Context:
    fixed_flags: dict[str, str]  # raw flag or normalized name -> "run.fixed_args[0]"
    override_keys: dict[str, str]  # dotted key -> where
    output_key: str | None
    equals_style: bool
    group_choices: dict[str, str] = field(default_factory=dict)


def _context(project: ProjectFileSpec) -> _Context:
    fixed: dict[str, str] = {}
    overrides: dict[str, str] = {}
    items: list[tuple[str, str]] = [
        (a.flag, f"launch.args[{i}]") for i, a in enumerate(project.launch.args)
    ]
    items += [(a.flag, f"run.fixed_args[{i}]") for i, a in enumerate(project.run.fixed_args)]
    items += [(d.flag, f"data[{i}].flag") for i, d in enumerate(project.data) if d.flag]
    for flag, where in items:
        fixed.setdefault(flag, where)
        fixed.setdefault(normalize_name(flag.split("=", 1)[0]), where)
        if not flag.startswith("-"):
            overrides.setdefault(flag.lstrip("+~").split("=", 1)[0], where)
    return _Context(
        fixed_flags=fixed,
        override_keys=overrides,
        output_key=project.output.config_path,
        equals_style=ArgStyle(project.launch.arg_style) == ArgStyle.EQUALS,
    )


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def suggest_tunables(
    root: Path | str,
    project: ProjectFileSpec,
    discovery: Discovery,
    *,
    limit: int = DEFAULT_LIMIT,
) -> list[Suggestion]:
    """Up to ``limit`` suggestions, known hyperparameter names first."""
    return suggest_tunables_report(root, project, discovery, limit=limit).suggestions


def suggest_tunables_report(
    root: Path | str,
    project: ProjectFileSpec,
    discovery: Discovery,
    *,
    limit: int = DEFAULT_LIMIT,
) -> SuggestionReport:
    """Suggestions plus every candidate left out with its reason."""
    if limit < 1:
        raise InvalidParams(f"limit must be >= 1, got {limit}", {"field": "limit"})
    root_path = Path(root).resolve()
    ctx = _context(project)
    notes: list[str] = []
    entrypoint = _entrypoint(root_path, project, discovery)
    if entrypoint is None:
        notes.append("no entrypoint matches launch.command; no flag suggestions")
    excluded: list[Excluded] = []
    candidates: list[_Candidate] = []
    baseline = project.launch.baseline_config
    hints = entrypoint.choice_hints if entrypoint else {}
    if baseline is not None:
        candidates += _config_candidates(root_path, baseline, hints, notes)
    elif entrypoint is not None and (
        entrypoint.hydra_config_name is not None or entrypoint.hydra_config_path is not None
    ):
        candidates += _hydra_candidates(root_path, entrypoint, hints, notes, project, ctx)
    if entrypoint is not None:
        candidates += _flag_candidates(entrypoint, ctx)
    suggestions: list[tuple[tuple[int, int], Suggestion]] = []
    config_leaves = {normalize_name(c.leaf) for c in candidates if c.source != "flag"}
    off = _off_switches(candidates)
    specs = project.metrics.specs
    primary = specs[0].name if specs else "loss"
    loss_primary = bool(re.search(r"loss|nll|ppl|perplexity", primary.lower()))
    for cand in candidates[:_MAX_CANDIDATES]:
        why = _exclusion(cand, ctx) or _behind_off_switch(cand, off)
        if why is None and loss_primary and _family(cand.leaf) == "label_smoothing":
            why = (
                f"label smoothing changes how the loss is computed, so the primary metric "
                f"'{primary}' of rounds would not compare; tune it with an accuracy-like "
                "primary metric"
            )
        if why is None and cand.source == "flag" and normalize_name(cand.leaf) in config_leaves:
            why = f"the config also has '{cand.leaf}'; the config-backed param is suggested"
        if why is not None:
            excluded.append(Excluded(key=cand.key, source=cand.source, reason=why))
            continue
        built = _build(cand, ctx)
        if (
            not isinstance(built, str)
            and built.type in ("float", "int")
            and (built.min_value is None or built.max_value is None)
        ):
            built = (
                f"no known range (default {built.default!r}): a policy could draw any "
                "value; add it by hand with min_value and max_value"
            )
        if isinstance(built, str):
            excluded.append(Excluded(key=cand.key, source=cand.source, reason=built))
            continue
        family = _family(cand.leaf)
        rank = _FAMILY_RANK.get(family, len(_FAMILIES)) if family else len(_FAMILIES)
        if built.type in ("bool", "choice") and family is None:
            rank += 1
        suggestions.append(((rank, cand.order), built))
    suggestions.sort(key=lambda x: x[0])
    chosen = _unique_names([s for _, s in suggestions])
    for extra in chosen[limit:]:
        excluded.append(
            Excluded(
                key=extra.flag or extra.config_path or extra.override or extra.name,
                source=extra.source,
                reason=f"beyond the limit of {limit} suggestions",
            )
        )
    final = chosen[:limit]
    for s in final:
        if s.type == "int" and _family(s.name) == "batch_size" and isinstance(s.default, int):
            _even_batches(s)
    constraints = _constraints(root_path, entrypoint, final, candidates, project)
    return SuggestionReport(
        suggestions=final,
        excluded=excluded,
        entrypoint=entrypoint.path if entrypoint else None,
        baseline_config=baseline,
        notes=notes,
        constraints=constraints,
    )


# -- constraints -----------------------------------------------------------------------------

_EXPR_TOKEN = re.compile(r"'[^']*'|[A-Za-z_][A-Za-z0-9_]*")
_EXPR_WORDS = _words("and or not in True False true false")


def _leaf_of(s: Suggestion) -> str:
    key = s.config_path or s.override or s.flag or s.name
    return normalize_name(key).rsplit(".", 1)[-1]


def _constraints(
    root: Path,
    entrypoint: Entrypoint | None,
    suggestions: list[Suggestion],
    candidates: list[_Candidate],
    project: ProjectFileSpec,
) -> list[ConstraintSuggestion]:
    """The code's checks between parameters as constraints over the suggested names
    (other names replaced by their value); sizes tied by ``a % b == 0`` become choices
    that satisfy it, so no draw can break it."""
    from trainee.discovery.constraints import propose_constraints

    if entrypoint is None or not suggestions:
        return []
    by_leaf: dict[str, list[Suggestion]] = {}
    for s in suggestions:
        by_leaf.setdefault(_leaf_of(s), []).append(s)
    values: dict[str, list[Any]] = {}
    for cand in candidates:
        if cand.has_value and cand.value is not None:
            values.setdefault(normalize_name(cand.leaf), []).append(cand.value)
    for arg in (*project.launch.args, *project.run.fixed_args):
        if arg.value is not None:
            values[normalize_name(arg.flag.split("=", 1)[0]).rsplit(".", 1)[-1]] = [arg.value]
    out: list[ConstraintSuggestion] = []
    for proposal in propose_constraints(root, entrypoint):
        mapping: dict[str, str] = {}
        tunable: list[Suggestion] = []
        for name in proposal.names:
            leaf = normalize_name(name)
            owners = by_leaf.get(leaf, [])
            if len(owners) == 1 and owners[0].name.isidentifier():
                mapping[name] = owners[0].name
                tunable.append(owners[0])
            elif not owners and len({repr(v) for v in values.get(leaf, [])}) == 1:
                mapping[name] = _literal_text(values[leaf][0])
            else:
                break
        else:
            if not tunable:
                continue
            expr = _substitute(proposal.expr, mapping)
            if not _holds_for_defaults(expr, tunable):
                continue
            if proposal.divisible is not None:
                _tie(proposal.divisible, by_leaf, values, f"'{expr}' ({proposal.reason})")
            if all(c.expr != expr for c in out):
                out.append(ConstraintSuggestion(expr=expr, reason=proposal.reason))
    return out


def _holds_for_defaults(expr: str, tunable: list[Suggestion]) -> bool:
    """The constraint parses in tuning.yaml's language and the baseline keeps it (the
    loader refuses it otherwise)."""
    from trainee.spec.constraints import parse_constraint

    try:
        constraint = parse_constraint(expr)
    except ConfigError:
        return False
    values = {s.name: s.default for s in tunable}
    if not set(constraint.names) <= set(values) or any(v is None for v in values.values()):
        return False
    return constraint.holds(values)


def _substitute(expr: str, mapping: dict[str, str]) -> str:
    """``expr`` with its names replaced (quoted strings and keywords kept)."""

    def one(m: re.Match[str]) -> str:
        word = m.group(0)
        return word if word in _EXPR_WORDS else mapping.get(word, word)

    return _EXPR_TOKEN.sub(one, expr)


def _literal_text(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "") + "'"


def _tie(
    divisible: tuple[str, str],
    by_leaf: dict[str, list[Suggestion]],
    values: dict[str, list[Any]],
    why: str,
) -> None:
    """``a % b == 0``: ``b`` among the divisors of ``a``'s default, ``a`` among multiples
    of every ``b`` choice near its default (x/2 .. 2x)."""
    a_leaf, b_leaf = (normalize_name(n) for n in divisible)
    sa = next(iter(by_leaf.get(a_leaf, [])), None)
    sb = next(iter(by_leaf.get(b_leaf, [])), None)
    sa = sa if sa is not None and sa.type == "int" else None
    sb = sb if sb is not None and sb.type == "int" else None
    da = sa.default if sa is not None else next(iter(values.get(a_leaf, [])), None)
    db = sb.default if sb is not None else next(iter(values.get(b_leaf, [])), None)
    if not (isinstance(da, int) and isinstance(db, int)) or da <= 0 or db <= 0 or da % db:
        return
    heads = [db]
    if sb is not None:
        lo, hi = int(sb.min_value or 1), int(sb.max_value or 2 * db)
        heads = [d for d in range(max(1, lo), hi + 1) if da % d == 0] or [db]
        _as_choices(sb, heads, why)
    if sa is not None:
        step = math.lcm(*heads)
        lo, hi = int(sa.min_value or step), int(sa.max_value or 2 * da)
        widths = {da}
        for factor in (0.5, 0.75, 1.5, 2.0):
            target = max(step, round(da * factor / step) * step)
            if lo <= target <= hi:
                widths.add(target)
        _as_choices(sa, sorted(widths), why)


def _even_batches(s: Suggestion) -> None:
    """Batch sizes as even choices around the default (x/2 .. 2x): an odd batch breaks
    code that pairs samples (mixup's flip, some norms), and nothing is lost."""
    d = s.default
    assert isinstance(d, int)
    if d < 4:
        return
    picks = {d, d // 2 + d // 2 % 2, 2 * d, round(d * 0.75 / 2) * 2, round(d * 1.5 / 2) * 2}
    lo, hi = s.min_value, s.max_value
    choices = sorted(c for c in picks if c > 0 and (c == d or (lo or 0) <= c <= (hi or 2 * d)))
    s.type = "choice"
    s.choices = choices
    s.min_value = s.max_value = None
    s.log = False
    s.reason += "; even choices x/2..2x (an odd batch breaks code that pairs samples)"


def _as_choices(s: Suggestion, choices: list[int], why: str) -> None:
    s.type = "choice"
    s.choices = choices
    s.min_value = s.max_value = None
    s.log = False
    s.reason += f"; choices that satisfy {why}"


def _scope(cand: _Candidate) -> tuple[str, str]:
    """(the parent key or source, the normalized leaf) of a candidate."""
    if cand.source == "flag":
        return "", normalize_name(cand.leaf)
    parent = cand.key.rsplit(".", 1)[0] if "." in cand.key else ""
    return parent, normalize_name(cand.leaf)


def _off_switches(candidates: list[_Candidate]) -> dict[tuple[str, str], str]:
    """Boolean options that are off by default (``--model-ema``, ``model_ema: false``)."""
    out: dict[tuple[str, str], str] = {}
    for cand in candidates:
        option = cand.option
        is_off = cand.value is False and (option is None or option.type == "bool")
        if is_off and (option is None or option.action in ("store_true", "toggle", None)):
            out[_scope(cand)] = cand.key
    return out


def _behind_off_switch(cand: _Candidate, off: dict[tuple[str, str], str]) -> str | None:
    """``model_ema_decay`` while ``--model-ema`` is off: it changes nothing."""
    parent, leaf = _scope(cand)
    parts = leaf.split("_")
    for n in range(len(parts) - 1, 0, -1):
        switch = off.get((parent, "_".join(parts[:n])))
        if switch is not None and switch != cand.key:
            return f"used only when {switch} is on, and it is off by default"
    return None


def _entrypoint(root: Path, project: ProjectFileSpec, discovery: Discovery) -> Entrypoint | None:
    words: list[str] = list(project.launch.command or ())
    shell = project.advanced.shell_command
    if shell:
        try:
            words = shlex.split(shell)
        except ValueError:
            words = shell.split()
    return entrypoint_for_command(root, discovery, words, project.advanced.working_dir)


def _exclusion(cand: _Candidate, ctx: _Context) -> str | None:
    key = cand.key
    if cand.source == "flag":
        option = cand.option
        spellings = option.flags if option and option.flags else [key]
        for flag in [
            *spellings,
            *([option.negative_flag] if option and option.negative_flag else []),
        ]:
            if flag in ctx.fixed_flags:
                return (
                    f"set by {ctx.fixed_flags[flag]} ({flag}); constant arguments are not tunable"
                )
        dest = normalize_name(option.dest if option else cand.leaf)
        if dest in ctx.fixed_flags:
            return f"'{dest}' is set by {ctx.fixed_flags[dest]}; constant arguments are not tunable"
        if option is not None and option.dest.lower() in (
            "config",
            "cfg",
            "config_file",
            "config_path",
            "config_name",
        ):
            return "the config file option (trainee passes the round config itself)"
    else:
        if key in ctx.group_choices:
            return f"the command chooses {key}={ctx.group_choices[key]}; constant arguments are not tunable"
        if ctx.output_key and _overlaps(key, ctx.output_key):
            return f"output.config_path '{ctx.output_key}' is set by trainee, not tunable"
        for other, where in ctx.override_keys.items():
            if _overlaps(key, other):
                return f"set by {where} ({other}); constant arguments are not tunable"
        leaf = normalize_name(cand.leaf)
        if leaf in ctx.fixed_flags:
            return f"'{leaf}' is set by {ctx.fixed_flags[leaf]}; constant arguments are not tunable"
        sections = [normalize_name(p) for p in key.split(".")[:-1]]
        hit = next((s for s in sections if s in _EXCLUDED_SECTIONS), None)
        if hit is not None and _family(cand.leaf) is None:
            return f"under '{hit}', a section that is not a training knob"
    named = _excluded_name(cand.leaf)
    if named is not None:
        return named
    is_bool = isinstance(cand.value, bool) or (
        cand.option is not None and cand.option.type == "bool"
    )
    words = set(re.split(r"[^a-z0-9]+", normalize_name(cand.leaf)))
    if is_bool and words & {"optimizer", "optim", "adam", "adamw", "sgd"}:
        return (
            f"'{normalize_name(cand.leaf)}' switches the optimizer, which changes the scale "
            "the learning rate's range was read for; choose it in launch.args"
        )
    values = [*(cand.choices or []), cand.value]
    modes = {v.lower() for v in values if isinstance(v, str)} & _MODE_VALUES
    if len(modes) >= 2 or (
        isinstance(cand.value, str) and cand.value.lower() in ("scratch", "resume")
    ):
        return f"'{normalize_name(cand.leaf)}' is a mode switch (values {', '.join(sorted(modes))})"
    return None


def _build(cand: _Candidate, ctx: _Context) -> Suggestion | str:
    """A Suggestion, or the reason none can be made."""
    if cand.source == "flag":
        return _build_flag(cand, ctx)
    value = cand.value
    if value is None:
        return "null in the config: its type is unknown"
    family = _family(cand.leaf)
    where = f"{cand.origin} ({_kind(value)} {value!r})"
    if isinstance(value, bool):
        return _suggest(cand, "bool", value, None, f"{where}: boolean")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return "not a finite number"
        return _numeric(cand, family, value, where)
    if isinstance(value, str):
        if "${" in value:
            return "an interpolation (${...}): it follows another key"
        if cand.choices and value in cand.choices:
            return _suggest(cand, "choice", value, None, f"{where}: choices {cand.choices}")
        if _PATHLIKE.search(value):
            return "a path"
        return "free text without known choices"
    return "a mapping or list"


def _numeric(
    cand: _Candidate, family: str | None, value: int | float, where: str
) -> Suggestion | str:
    if cand.choices and value in cand.choices:
        return _suggest(cand, "choice", value, None, f"{where}: choices {cand.choices}")
    as_float = isinstance(value, float) or family in _FLOAT_FAMILIES
    if family == "warmup" and isinstance(value, int):
        as_float = False
    if as_float:
        b = _float_bounds(family, float(value), normalize_name(cand.leaf))
        return _suggest(cand, "float", float(value), b, f"{where}: {b.why}")
    b_int = _int_bounds(family, int(value))
    if b_int is None:
        return "a negative integer default (usually means 'off')"
    return _suggest(cand, "int", int(value), b_int, f"{where}: {b_int.why}")


def _build_flag(cand: _Candidate, ctx: _Context) -> Suggestion | str:
    option = cand.option
    assert option is not None
    if option.nargs not in (None, "?"):
        return "takes a list of values"
    family = _family(option.dest)
    kind = option.type
    default = option.default
    if option.action in ("count", "store_const", "append_const", "append", "help", "version"):
        return f"action {option.action} is not a settable value"
    where = f"{cand.origin} ({kind or 'custom type'}, default {default!r})"
    if option.choices:
        if default is not None and not any(
            type(c) is type(default) and c == default for c in option.choices
        ):
            default = None
        return _suggest(
            cand,
            "choice",
            default,
            None,
            f"{where}: choices {option.choices}",
            choices=option.choices,
        )
    if kind == "bool":
        return _bool_flag(cand, option, ctx, where)
    if kind in ("str", "path") or kind is None:
        if kind is None:
            return "a custom option type: the value kind is unknown"
        return "a path" if kind == "path" else "free text without choices"
    if kind == "float":
        if isinstance(default, int | float) and not isinstance(default, bool):
            if not math.isfinite(float(default)):
                return "not a finite default"
            b = _float_bounds(family, float(default), normalize_name(option.dest))
            fdefault: float | None = float(default)
        else:
            b = _float_bounds(family, None, normalize_name(option.dest))
            fdefault = None
        _clamp(b, option.min_value, option.max_value, fdefault)
        return _suggest(cand, "float", fdefault, b, f"{where}: {b.why}")
    idefault = default if isinstance(default, int) and not isinstance(default, bool) else None
    bi = _int_bounds(family, idefault)
    if bi is None:
        return "a negative integer default (usually means 'off')"
    _clamp(bi, option.min_value, option.max_value, idefault)
    return _suggest(cand, "int", idefault, bi, f"{where}: {bi.why}")


def _bool_flag(
    cand: _Candidate, option: EntryOption, ctx: _Context, where: str
) -> Suggestion | str:
    if ctx.equals_style:
        default = option.default if isinstance(option.default, bool) else None
        return _suggest(cand, "bool", default, None, f"{where}: boolean, written --flag=True/False")
    if option.action == "store_true" or (option.action == "toggle" and option.default is not True):
        if option.default is True:
            return "a store_true flag that defaults to true cannot be switched off"
        return _suggest(cand, "bool", False, None, f"{where}: boolean flag, passed when true")
    negative = (
        option.negative_flag if option.action in ("toggle", "BooleanOptionalAction") else None
    )
    if option.action == "store_false":
        negative = option.flag
    if option.action == "BooleanOptionalAction" and option.default is not True:
        return _suggest(cand, "bool", False, None, f"{where}: boolean flag, passed when true")
    if negative is None:
        return "a boolean option whose false form cannot be passed"
    name = normalize_name(negative).replace("-", "_")
    target = normalize_name(option.dest)
    desc = f"passing {negative} sets {target} to false"
    return _suggest(
        cand,
        "bool",
        False,
        None,
        f"{where}: defaults to true, so the tunable is {negative} (passed when true)",
        flag=negative,
        name=name,
        description=f"{desc}. {cand.description}".strip(),
    )


def _suggest(
    cand: _Candidate,
    type_: Literal["float", "int", "bool", "choice"],
    default: Any,
    bounds: _Bounds | None,
    reason: str,
    *,
    choices: list[Any] | None = None,
    flag: str | None = None,
    name: str | None = None,
    description: str | None = None,
) -> Suggestion:
    if bounds is not None and type_ in ("float", "int"):
        bounds = _clamp(bounds, None, None, default)
    lo = bounds.lo if bounds else None
    hi = bounds.hi if bounds else None
    if type_ == "int":
        lo = int(lo) if lo is not None else None
        hi = int(hi) if hi is not None else None
    elif type_ == "float":
        lo = float(lo) if lo is not None else None
        hi = float(hi) if hi is not None else None
    return Suggestion(
        name=name or cand.name_hint or normalize_name(cand.leaf),
        source=cand.source,
        type=type_,
        reason=reason,
        flag=(flag or cand.key) if cand.source == "flag" else None,
        config_path=cand.key if cand.source == "config" else None,
        override=cand.override_prefix + cand.key if cand.source == "override" else None,
        default=default,
        min_value=lo,
        max_value=hi,
        choices=list(choices or cand.choices or []) if type_ == "choice" else None,
        log=bool(bounds and bounds.log),
        description=(description if description is not None else cand.description)[:300],
    )


def _unique_names(suggestions: list[Suggestion]) -> list[Suggestion]:
    """Valid, distinct names: a clash gets the parent key as prefix, then a number."""
    seen: set[str] = set()
    out: list[Suggestion] = []
    for s in suggestions:
        key = s.config_path or s.override or ""
        name = _valid_name(s.name)
        if name in seen and "." in key:
            parts = key.split(".")
            name = _valid_name("_".join(parts[-2:]))
        base, n = name, 2
        while name in seen:
            name, n = f"{base}_{n}", n + 1
        seen.add(name)
        s.name = name
        out.append(s)
    return out


def _valid_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.\-]+", "_", name).strip("_.-") or "param"
    if not re.match(r"[A-Za-z_]", cleaned):
        cleaned = "p_" + cleaned
    return cleaned[:128] if _NAME_OK.match(cleaned[:128]) else "param"


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    return type(value).__name__


# -- flags ---------------------------------------------------------------------------------


def _flag_candidates(ep: Entrypoint, ctx: _Context) -> list[_Candidate]:
    out: list[_Candidate] = []
    label = {"configurator": "configurator global"}.get(ep.framework, f"{ep.framework} option")
    for i, option in enumerate(ep.options):
        out.append(
            _Candidate(
                key=option.flag,
                source="flag",
                leaf=option.dest,
                value=option.default,
                has_value=option.default is not None,
                order=10_000 + i,
                origin=f"{ep.options_from or ep.path} {label} {option.flag}",
                description=option.help,
                choices=option.choices,
                declared=option.type,
                option=option,
                name_hint=normalize_name(option.dest),
            )
        )
    return out


# -- baseline config -----------------------------------------------------------------------


def _config_candidates(
    root: Path, rel: str, hints: dict[str, list[Any]], notes: list[str]
) -> list[_Candidate]:
    from trainee.spec.yamlio import YamlDocument

    path = root / rel
    doc = YamlDocument.load(path)
    data, lines = doc.to_plain()
    text_lines = _text_lines(path) if doc.kind == "yaml" else []
    out: list[_Candidate] = []
    for order, (keypath, value) in enumerate(_leaves(data, ())):
        key = ".".join(str(p) for p in keypath)
        leaf, name_hint = _leaf_name(keypath)
        comment = _comment(text_lines, lines.get(keypath))
        out.append(
            _Candidate(
                key=key,
                source="config",
                leaf=leaf,
                value=value,
                has_value=True,
                order=order,
                origin=f"{rel} {key}",
                description=comment,
                choices=_choices_for(leaf, value, comment, hints),
                name_hint=name_hint,
            )
        )
    return out


def _leaves(node: Any, path: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if not isinstance(key, str) or not key or "." in key or any(c.isspace() for c in key):
                continue
            if not path and key == "defaults":
                continue
            yield from _leaves(value, (*path, key))
    elif isinstance(node, list):
        if 1 <= len(node) <= 4 and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in node
        ):
            for i, value in enumerate(node):
                yield (*path, i), value
        elif path:
            yield path, node
    elif path:
        yield path, node


def _leaf_name(keypath: tuple[str | int, ...]) -> tuple[str, str]:
    """(the leaf used for name rules, the suggested param name)."""
    parts = [str(p) for p in keypath]
    last = keypath[-1]
    if isinstance(last, int):
        parent = parts[-2] if len(parts) > 1 else "item"
        return parent, f"{normalize_name(parent)}_{last}"
    leaf = parts[-1]
    if normalize_name(leaf) in _GENERIC_LEAVES and len(parts) > 1:
        return leaf, normalize_name(f"{parts[-2]}_{leaf}")
    return leaf, normalize_name(leaf)


def _text_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _comment(text_lines: list[str], line: int | None) -> str:
    """The end-of-line comment of a YAML key, else a comment line right above it."""
    if line is None or not (1 <= line <= len(text_lines)):
        return ""
    own = _eol_comment(text_lines[line - 1])
    if own:
        return own
    above = text_lines[line - 2].strip() if line >= 2 else ""
    if above.startswith("#"):
        return above.lstrip("#").strip()
    return ""


def _eol_comment(line: str) -> str:
    quote: str | None = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[i + 1 :].strip()
    return ""


def _choices_for(
    leaf: str, value: Any, comment: str, hints: dict[str, list[Any]]
) -> list[Any] | None:
    """Choices of a config key: a ``Literal`` of that name in the entrypoint, or a comment
    listing alternatives (``sgd | momentum | adam``) that includes the current value."""
    hinted = hints.get(leaf)
    if hinted and value in hinted:
        return list(hinted)
    if not isinstance(value, str) or not comment:
        return None
    head = comment.split(";")[0]
    for sep in ("|", ","):
        if sep in head:
            words = [w.strip().strip("'\"`") for w in re.sub(r"^one of[:\s]*", "", head).split(sep)]
            words = [w for w in words if w and re.fullmatch(r"[A-Za-z0-9_.\-+/]+", w)]
            if len(words) >= 2 and value in words:
                return words
    return None


# -- Hydra ---------------------------------------------------------------------------------


def _hydra_candidates(
    root: Path,
    ep: Entrypoint,
    hints: dict[str, list[Any]],
    notes: list[str],
    project: ProjectFileSpec,
    ctx: _Context,
) -> list[_Candidate]:
    """Overrides of a Hydra app, from the config a round composes
    (:func:`trainee.discovery.hydra.compose_hydra` with the command's and constant
    args' overrides): each group with several options the command does not choose, and
    every leaf key. A group the command chooses (``model=mlp``) pins that option: its
    keys are offered, the choice is not. Keys of a group whose option a round may
    change are ``++`` overrides (the other option may lack them)."""
    from trainee.discovery.hydra import compose_hydra, hydra_overrides

    overrides = hydra_overrides(project, ep)
    cfg = compose_hydra(root, ep, overrides)
    if cfg is None:
        notes.append("the Hydra primary config was not found; no override suggestions")
        return []
    notes += cfg.notes
    pinned: dict[str, str] = {}
    for text in overrides:
        key, _, value = text.partition("=")
        key = key.lstrip("+~")
        if key in cfg.groups:
            pinned[key.replace("/", ".")] = value
            ctx.override_keys.pop(key, None)  # a group choice pins the group, not its keys
    ctx.group_choices = pinned
    out: list[_Candidate] = []
    free: set[str] = set()
    for group, option in cfg.groups.items():
        options = cfg.group_options.get(group, [])
        mount = group.replace("/", ".")
        if option is None or option not in options or len(options) < 2:
            continue
        if mount not in pinned:
            free.add(group)
        out.append(
            _Candidate(
                key=mount,
                source="override",
                leaf=group.rsplit("/", 1)[-1],
                value=option,
                has_value=True,
                order=len(out),
                origin=f"Hydra config group {group} ({cfg.primary} defaults)",
                description=f"Hydra config group {group}: one of {', '.join(options)}",
                choices=options,
            )
        )
    comments = _SourceComments(root)
    for keypath, value in _leaves(cfg.data, ()):
        key = ".".join(str(p) for p in keypath)
        if keypath[0] == "hydra":
            continue
        source = cfg.sources.get(key) or cfg.sources.get(key.rsplit(".", 1)[0]) or cfg.primary
        owner = _group_of(source, cfg.config_dir, cfg.groups)
        leaf, hint = _leaf_name(keypath)
        comment = comments.get(source, keypath)
        if owner is not None:
            mount = owner.replace("/", ".")
            comment = f"{comment} (from {source}; valid while {mount}={cfg.groups[owner]})"
        out.append(
            _Candidate(
                key=key,
                source="override",
                leaf=leaf,
                value=value,
                has_value=True,
                order=len(out),
                origin=f"Hydra {source} {key}",
                description=comment.strip(),
                choices=_choices_for(leaf, value, comment, hints),
                name_hint=hint,
                override_prefix="++" if owner in free else "",
            )
        )
    return out


def _group_of(source: str, config_dir: str, groups: dict[str, str | None]) -> str | None:
    """The config group whose option file ``source`` is (``conf/model/small.yaml`` ->
    ``model``), None for the primary config and plain defaults."""
    prefix = "" if config_dir in ("", ".") else config_dir.rstrip("/") + "/"
    if not source.startswith(prefix):
        return None
    folder = source[len(prefix) :].rsplit("/", 1)[0] if "/" in source[len(prefix) :] else ""
    return folder if folder in groups else None


class _SourceComments:
    """End-of-line (or line-above) comments of the keys of the files a config came from."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, tuple[list[str], dict[Any, int]]] = {}

    def get(self, source: str, keypath: tuple[str | int, ...]) -> str:
        if source not in self.files:
            from trainee.spec.yamlio import YamlDocument

            try:
                _, lines = YamlDocument.load(self.root / source).to_plain()
            except ConfigError:
                lines = {}
            self.files[source] = (_text_lines(self.root / source), lines)
        text, lines = self.files[source]
        for i in range(len(keypath)):  # the file's own keys lack the package prefix
            line = lines.get(tuple(keypath[i:]))
            if line is not None:
                return _comment(text, line)
        return ""


# -- applying -------------------------------------------------------------------------------


def apply_suggestions(
    root: Path | str,
    suggestions: list[Suggestion],
    *,
    replace: bool = False,
    constraints: list[ConstraintSuggestion] | None = None,
) -> ApplyResult:
    """Write suggestions into ``.trainee/tuning.yaml`` (comments kept).

    Without ``replace`` only names and keys not already there are added; with it the
    params list becomes exactly the suggestions. Each param is checked against the
    project (``check_project``) first; one that does not pass is skipped with the reason.
    """
    root_path = Path(root).resolve()
    trainee_dir = root_path / ".trainee"
    project = load_project_file(trainee_dir / "project.yaml")
    tfile = trainee_dir / "tuning.yaml"
    tuning = load_tuning_file(tfile) if tfile.exists() else TuningFileSpec()
    params: list[ParamSpec] = [] if replace else list(tuning.params)
    written: list[str] = []
    skipped: list[Skipped] = []
    for s in suggestions:
        param = s.to_param()
        clash = next((p for p in params if _same_target(p, param)), None)
        if clash is not None:
            skipped.append(Skipped(name=s.name, reason=f"already in tuning.yaml as '{clash.name}'"))
            continue
        try:
            check_project(root_path, project, TuningFileSpec(params=(*params, param)))
        except ConfigError as exc:
            skipped.append(Skipped(name=s.name, reason=exc.reason or exc.message))
            continue
        params.append(param)
        written.append(s.name)
    names = {p.name for p in params}
    kept = [] if replace else list(tuning.constraints)
    added: list[str] = []
    for c in constraints or []:
        if c.expr in kept or c.expr in added:
            continue
        if not all(w in names for w in _EXPR_TOKEN.findall(c.expr) if _is_name(w)):
            continue
        try:  # the loader's checks: it parses, names params with values, the baseline keeps it
            check_project(
                root_path,
                project,
                TuningFileSpec(params=tuple(params), constraints=(*kept, *added, c.expr)),
            )
        except ConfigError as exc:
            skipped.append(Skipped(name=c.expr, reason=exc.reason or exc.message))
            continue
        added.append(c.expr)
    if written or replace or added:
        save_project_files(
            root_path,
            project,
            TuningFileSpec(params=tuple(params), constraints=(*kept, *added)),
        )
    return ApplyResult(written=written, skipped=skipped, tuning_file=str(tfile), constraints=added)


def _is_name(word: str) -> bool:
    return not word.startswith("'") and word not in _EXPR_WORDS


def _same_target(a: ParamSpec, b: ParamSpec) -> bool:
    if a.name == b.name:
        return True
    if a.flag and a.flag == b.flag:
        return True
    if a.override and b.override and a.override.lstrip("+~") == b.override.lstrip("+~"):
        return True
    return bool(a.config_path and b.config_path and _overlaps(a.config_path, b.config_path))


def discover_tunables(
    root: Path | str,
    *,
    limit: int = DEFAULT_LIMIT,
    apply: bool = False,
    replace: bool = False,
) -> TunablesResult:
    """``trainee tunables discover``: validate the project, suggest, and optionally write."""
    spec = load_project(root)
    project = spec.to_project_file()
    discovery = discover(spec.project_root)
    report = suggest_tunables_report(spec.project_root, project, discovery, limit=limit)
    result = TunablesResult(
        project_root=spec.project_root,
        entrypoint=report.entrypoint,
        baseline_config=report.baseline_config,
        suggestions=report.suggestions,
        excluded=report.excluded,
        notes=report.notes,
        constraints=report.constraints,
    )
    if apply:
        applied = apply_suggestions(
            spec.project_root, report.suggestions, replace=replace, constraints=report.constraints
        )
        result.applied = True
        result.written = applied.written
        result.skipped = applied.skipped
    elif replace:
        result.notes.append("--replace only matters with --apply; nothing was written")
    return result
