"""The bwrap command line: mount order, what is writable, flags, symlink refusals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainee.errors import SandboxError
from trainee.launch.render import render_round
from trainee.launch.sandbox import bwrap_argv, check_bwrap, wrap, writable_paths
from trainee.spec import ProjectSpec

from .projects import make_project, round_of

BWRAP = "/usr/bin/bwrap"
PROJECT = "version: 1\nlaunch:\n  command: [python, train.py]\n"


def project(root: Path) -> ProjectSpec:
    return make_project(root, PROJECT)


def binds(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-2]) if a == flag]


def fake_bwrap(tmp_path: Path) -> str:
    exe = tmp_path / "bin" / "bwrap"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    return str(exe)


def test_mount_order_and_writable_places(tmp_path: Path) -> None:
    spec = project(tmp_path / "proj")
    rnd = round_of(spec, session=2, index=3)
    argv = bwrap_argv(
        ["python", "train.py"],
        layout=rnd,
        cwd=spec.working_dir,
        bwrap=fake_bwrap(tmp_path),
        devices=["/dev/nvidia0"],
    )
    root = tmp_path / "proj"
    trainee = root / ".trainee"
    assert argv[0] == fake_bwrap(tmp_path)
    # nothing of the host but the system folders: no "--ro-bind / /"
    assert ["--ro-bind", "/", "/"] not in [argv[i : i + 3] for i in range(len(argv))]
    start = argv.index("--dev")
    assert argv[start : start + 10] == [
        "--dev",
        "/dev",
        "--dev-bind",
        "/dev/nvidia0",
        "/dev/nvidia0",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
    ]
    # the system folders: bound if they exist where the round runs (a cluster node)
    assert {"/usr", "/etc"} <= set(binds(argv, "--ro-bind-try"))
    # the project lives under /tmp here: it is bound again after the tmpfs
    assert str(root).startswith("/tmp/")
    assert str(root) in binds(argv, "--ro-bind")
    assert sorted(binds(argv, "--bind")) == sorted(
        [
            str(trainee / "runs" / "session-0002" / "round-0003"),
            *(str(trainee / "cache" / n) for n in ("home", "xdg", "hf", "torch", "mpl", "wandb")),
            str(trainee / "logs"),
        ]
    )
    first_bind_under_tmp = min(
        i for i, a in enumerate(argv) if i > 0 and a.startswith("/tmp/") and "bind" in argv[i - 1]
    )
    assert argv.index("--tmpfs") < first_bind_under_tmp
    # deeper mounts come after shallower ones: the deepest rule wins for every path
    mounted = [argv[i + 1] for i, a in enumerate(argv[:-2]) if a in ("--bind", "--ro-bind")]
    assert str(root) in mounted  # the project must be there: never optional
    under_root = [p for p in mounted if p.startswith(str(root))]
    assert under_root == sorted(under_root, key=lambda p: p.count("/"))
    tail = argv[argv.index("--die-with-parent") :]
    assert tail == [
        "--die-with-parent",
        "--unshare-pid",
        "--cap-drop",
        "ALL",
        "--chdir",
        str(root),
        "--",
        "python",
        "train.py",
    ]
    for path in binds(argv, "--bind"):
        assert Path(path).is_dir()


def test_network_false_adds_unshare_net(tmp_path: Path) -> None:
    spec = project(tmp_path)
    rnd = round_of(spec)
    kwargs = {"layout": rnd, "cwd": "/", "bwrap": fake_bwrap(tmp_path), "devices": []}
    assert "--unshare-net" not in bwrap_argv(["true"], network=True, **kwargs)  # type: ignore[arg-type]
    assert "--unshare-net" in bwrap_argv(["true"], network=False, **kwargs)  # type: ignore[arg-type]


def test_store_spec_files_artifacts_and_other_rounds_are_not_writable(tmp_path: Path) -> None:
    spec = project(tmp_path)
    rnd = round_of(spec, 1, 2)
    round_of(spec, 1, 1).dir.mkdir(parents=True)
    argv = bwrap_argv(["true"], layout=rnd, cwd="/", bwrap=fake_bwrap(tmp_path), devices=[])
    writable = [Path(p) for p in binds(argv, "--bind")]
    trainee = tmp_path / ".trainee"
    for path in (
        trainee / "runtime.sqlite3",
        trainee / "project.yaml",
        trainee / "tuning.yaml",
        trainee / "artifacts" / "session-0001" / "round-0002.log",
        trainee / "runs" / "session-0001" / "round-0001" / "x",
        trainee / "runs" / "session-0001" / "x",
    ):
        assert not any(path.is_relative_to(w) for w in writable), path


def test_a_trainee_dir_elsewhere_is_bound_read_only_too(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    real_trainee = tmp_path / "elsewhere" / "trainee"
    real_trainee.mkdir(parents=True)
    root.mkdir()
    (root / ".trainee").symlink_to(real_trainee)
    spec = make_project(root, PROJECT)
    rnd = round_of(spec)
    argv = bwrap_argv(["true"], layout=rnd, cwd="/", bwrap=fake_bwrap(tmp_path), devices=[])
    assert {str(root), str(real_trainee)} <= set(binds(argv, "--ro-bind"))
    assert str(real_trainee / "runs" / "session-0001" / "round-0001") in binds(argv, "--bind")


def test_a_symlink_inside_trainee_dir_is_bound_by_its_real_path(tmp_path: Path) -> None:
    spec = project(tmp_path)
    trainee = tmp_path / ".trainee"
    (trainee / "big-cache").mkdir()
    (trainee / "cache").symlink_to(trainee / "big-cache")
    paths = writable_paths(round_of(spec))
    assert paths[1] == trainee / "big-cache" / "home"
    assert (trainee / "big-cache" / "home").is_dir()


@pytest.mark.parametrize("link", ["runs", "cache", "logs"])
def test_a_writable_place_leading_out_of_trainee_dir_is_refused(tmp_path: Path, link: str) -> None:
    spec = project(tmp_path / "proj")
    outside = tmp_path / "etc"
    outside.mkdir()
    (tmp_path / "proj" / ".trainee" / link).symlink_to(outside)
    with pytest.raises(SandboxError) as info:
        bwrap_argv(["true"], layout=round_of(spec), cwd="/", bwrap=fake_bwrap(tmp_path))
    assert f"resolves to {outside} through a symlink" in info.value.message
    assert "--unsafe" in info.value.message
    assert list(outside.iterdir()) == []


def test_a_dangling_or_file_component_is_refused(tmp_path: Path) -> None:
    spec = project(tmp_path)
    (tmp_path / ".trainee" / "logs").write_text("not a folder")
    with pytest.raises(SandboxError, match="is not a folder"):
        writable_paths(round_of(spec))


def test_without_create_nothing_is_made(tmp_path: Path) -> None:
    spec = project(tmp_path)
    paths = writable_paths(round_of(spec), create=False)
    assert paths[0] == tmp_path / ".trainee" / "runs" / "session-0001" / "round-0001"
    assert sorted(p.name for p in (tmp_path / ".trainee").iterdir()) == [
        "project.yaml",
        "tuning.yaml",
    ]


@pytest.mark.parametrize("call", ["argv", "check"])
def test_missing_bwrap_names_the_unsafe_way_out(tmp_path: Path, call: str) -> None:
    spec = project(tmp_path)
    with pytest.raises(SandboxError) as info:
        if call == "argv":
            bwrap_argv(["true"], layout=round_of(spec), cwd="/", bwrap="/nonexistent/bwrap")
        else:
            check_bwrap("/nonexistent/bwrap")
    assert "/nonexistent/bwrap" in info.value.message
    assert "--unsafe" in info.value.message


def test_wrap_keeps_env_cwd_and_display(tmp_path: Path) -> None:
    spec = project(tmp_path)
    rnd = round_of(spec)
    rendered = render_round(spec, rnd, {}, base_env={"PATH": os.defpath})
    wrapped = wrap(rendered, spec, rnd, network=False, bwrap=fake_bwrap(tmp_path))
    assert wrapped.argv[0] == fake_bwrap(tmp_path)
    # the round runs in its scratch folder: the script by its real path in the project
    script = os.path.join(os.path.realpath(spec.working_dir), "train.py")
    assert wrapped.argv[-3:] == ("--", "python", script)
    assert rendered.cwd == str(rnd.dir / "cwd") and (rnd.dir / "cwd" / "train.py").is_symlink()
    assert "--unshare-net" in wrapped.argv
    assert (wrapped.env, wrapped.cwd, wrapped.display) == (
        rendered.env,
        rendered.cwd,
        rendered.display,
    )
