"""Properties: the loader only ever raises ConfigError; saved text reads back the same."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainee.errors import ConfigError
from trainee.spec import (
    ArgSpec,
    LaunchSpec,
    ParamSpec,
    ParamType,
    ProjectFileSpec,
    TuningFileSpec,
    load_project,
    load_project_file,
    load_tuning_file,
    save_project_files,
)

from .conftest import make_project, readme_example

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

YAML_BITS = st.sampled_from(
    [":", "- ", "\n", "  ", "[", "]", "{", "}", "&a ", "*a", "!!", "'", '"', "#", "|", ">",
     "? ", "---", "...", "%", "\t", "\x00", "\ufeff", "version", "launch", "command", "params",
     "1e-5", ".inf", "~", "null", "true", "2024-01-01", "0x1F", "<<: ", "\\", "{x}", ".."]
)  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn, base: str) -> str:
    """``base`` with a few random cuts, insertions and YAML-significant fragments."""
    text = base
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 12))
        piece = draw(st.one_of(YAML_BITS, st.text(max_size=6)))
        text = text[:pos] + piece + text[pos + cut :]
    return text


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="spec-prop-"))
    try:
        yield make_project(root / "proj")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _load_only_config_errors(root: Path) -> None:
    try:
        load_project(root)
    except ConfigError as exc:
        assert exc.file is not None and exc.reason
        assert str(exc).startswith(exc.file)


@SETTINGS
@given(
    text=st.one_of(
        st.text(max_size=300),
        mutated(readme_example("project.yaml")),
        mutated("version: 1\nlaunch:\n  command: [python, train.py]\n"),
    )
)
def test_project_yaml_loader_raises_only_config_errors(scratch: Path, text: str) -> None:
    path = scratch / ".trainee" / "project.yaml"
    try:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
    except UnicodeEncodeError:
        return
    (scratch / ".trainee" / "tuning.yaml").unlink(missing_ok=True)
    _load_only_config_errors(scratch)


@SETTINGS
@given(
    text=st.one_of(
        st.text(max_size=300),
        mutated(readme_example("tuning.yaml")),
        st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    )
)
def test_tuning_yaml_loader_raises_only_config_errors(scratch: Path, text: str) -> None:
    (scratch / ".trainee" / "project.yaml").write_text(
        "version: 1\nlaunch:\n  command: [python, train.py]\n  baseline_config: configs/base.yaml\n"
    )
    (scratch / ".trainee" / "tuning.yaml").write_bytes(text.encode("utf-8", "surrogateescape"))
    _load_only_config_errors(scratch)


@SETTINGS
@given(data=st.binary(max_size=400))
def test_raw_bytes_raise_only_config_errors(scratch: Path, data: bytes) -> None:
    (scratch / ".trainee" / "project.yaml").write_bytes(data)
    for loader in (load_project_file, load_tuning_file):
        with contextlib.suppress(ConfigError):
            loader(scratch / ".trainee" / "project.yaml")


@settings(max_examples=80, deadline=None, database=None)
@given(
    prompt=st.text(max_size=80),
    description=st.text(max_size=40),
    choice=st.text(min_size=1, max_size=15),
    number=st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300),
)
def test_any_text_and_number_round_trip_through_save(
    prompt: str, description: str, choice: str, number: float
) -> None:
    with tempfile.TemporaryDirectory(prefix="spec-rt-") as tmp:
        root = make_project(Path(tmp) / "p")
        project = ProjectFileSpec(
            launch=LaunchSpec(
                command=("python", choice),
                args=(ArgSpec(flag="--note", value=description), ArgSpec(flag="--n", value=number)),
            )
        )
        project = msgspec.structs.replace(
            project, metrics=msgspec.structs.replace(project.metrics, prompt=prompt)
        )
        tuning = TuningFileSpec(
            params=(
                ParamSpec(
                    name="x",
                    flag="--x",
                    type=ParamType.FLOAT,
                    default=number,
                    description=description,
                ),
                ParamSpec(
                    name="c", override="c", type=ParamType.CHOICE, choices=(choice, "zz-other")
                )
                if choice != "zz-other"
                else ParamSpec(name="c", override="c", type=ParamType.CHOICE, choices=("a",)),
            )
        )
        try:
            save_project_files(root, project, tuning)
        except ConfigError as exc:
            # only text UTF-8 cannot hold, or a NUL in argv, is refused; nothing is written
            assert exc.reason in ("contains a NUL byte", "not writable as UTF-8") or (
                "not writable as UTF-8" in str(exc)
            )
            assert not (root / ".trainee" / "project.yaml").exists()
            return
        assert load_project_file(root / ".trainee" / "project.yaml") == project
        assert load_tuning_file(root / ".trainee" / "tuning.yaml") == tuning
