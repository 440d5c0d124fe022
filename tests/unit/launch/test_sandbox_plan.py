"""The sandbox's mount plan: what is bound, hidden and bound again, and in which order.

:func:`mount_plan` is pure apart from listing the folders that hold private entries, so
each case builds a small real tree under tmp_path and reads the plan.
"""

from __future__ import annotations

from pathlib import Path

from trainee.launch.sandbox import Mount, Private, mount_plan, tool_paths


def tree(root: Path, *paths: str) -> None:
    for rel in paths:
        path = root / rel
        if rel.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(rel)


def test_a_private_folder_inside_a_bound_one_is_hidden_after_it(tmp_path: Path) -> None:
    tree(tmp_path, "proj/train.py", "proj/run/trainee.sock")
    proj, run = str(tmp_path / "proj"), str(tmp_path / "proj" / "run")
    plan = mount_plan({proj: "ro"}, [Private(Path(run))])
    assert plan == [Mount("ro", proj), Mount("tmpfs", run)]


def test_a_private_folder_holding_the_project_is_hidden_then_the_project_bound(
    tmp_path: Path,
) -> None:
    """TRAINEE_SOCKET beside the project: the runtime folder holds the project. When the
    runtime folder is visible at all (inside something bound), it is hidden first and the
    project bound again inside it; when it is not, nothing needs hiding."""
    tree(tmp_path, "x/trainee.sock", "x/token", "x/proj/train.py")
    x, proj = str(tmp_path / "x"), str(tmp_path / "x" / "proj")
    assert mount_plan({proj: "ro"}, [Private(Path(x))]) == [Mount("ro", proj)]
    plan = mount_plan({str(tmp_path): "ro", proj: "ro"}, [Private(Path(x))])
    assert plan == [Mount("ro", str(tmp_path)), Mount("tmpfs", x), Mount("ro", proj)]


def test_a_folder_with_private_entries_is_rebuilt_without_them(tmp_path: Path) -> None:
    """The project's .trainee: the store and the control folder go, the rest is bound
    again read-only, and the writable places deeper are bound after that."""
    tree(
        tmp_path,
        "p/train.py",
        "p/.trainee/project.yaml",
        "p/.trainee/runtime.sqlite3",
        "p/.trainee/runtime.sqlite3-wal",
        "p/.trainee/control/session-0001/round-0001/exit.json",
        "p/.trainee/runs/session-0001/round-0001/",
        "p/.trainee/logs/",
    )
    (tmp_path / "p" / ".trainee" / "latest").symlink_to("runs")
    p = tmp_path / "p"
    t = p / ".trainee"
    rnd = t / "runs" / "session-0001" / "round-0001"
    plan = mount_plan(
        {str(p): "ro", str(rnd): "rw", str(t / "logs"): "rw"},
        [Private(t, ("runtime.sqlite3", "runtime.sqlite3-*", "control"))],
    )
    assert plan == [
        Mount("ro", str(p)),
        Mount("tmpfs", str(t)),
        Mount("symlink", str(t / "latest"), "runs"),
        Mount("ro", str(t / "project.yaml")),
        Mount("ro", str(t / "runs")),
        Mount("rw", str(t / "logs")),
        Mount("rw", str(rnd)),
    ]


def test_a_wanted_path_that_is_private_stays_hidden(tmp_path: Path) -> None:
    tree(tmp_path, "home/.trainee/config.json", "home/.trainee/bin/tool")
    home = tmp_path / "home"
    private = [Private(home / ".trainee"), Private(home, (".*",))]
    plan = mount_plan({str(home / ".trainee"): "ro", str(home): "ro"}, private)
    # HOME bound (it was asked for) without any of its dot entries; ~/.trainee never
    assert plan == [Mount("ro", str(home)), Mount("tmpfs", str(home))]


def test_hidden_files_get_an_empty_file_only_where_visible(tmp_path: Path) -> None:
    tree(tmp_path, "etc/shadow", "other/shadow")
    etc = str(tmp_path / "etc")
    files = [str(tmp_path / "etc" / "shadow"), str(tmp_path / "other" / "shadow")]
    plan = mount_plan({etc: "ro"}, [], hidden_files=files)
    assert plan == [Mount("ro", etc), Mount("file", files[0])]


def test_tool_paths_bind_a_path_folder_never_the_home_holding_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    tree(
        tmp_path,
        "home/bin/mytool",
        "home/.local/bin/pipx-tool",
        "home/.local/share/keyrings/login.keyring",
        "home/.trainee/config.json",
        "venv/bin/python",
        "venv/pyvenv.cfg",
        "base/bin/python3.11",
        "base/lib/python3.11/os.py",
    )
    (tmp_path / "venv" / "pyvenv.cfg").write_text(f"home = {tmp_path / 'base' / 'bin'}\n")
    env = {
        "PATH": ":".join(
            [str(home / "bin"), str(home / ".local" / "bin"), str(home), str(tmp_path / "venv/bin")]
        ),
    }
    found = tool_paths(["python"], env, homes=[str(home)])
    assert found == [
        home / "bin",
        home / ".local" / "bin",
        tmp_path / "venv",
        tmp_path / "base",
    ]


def test_a_data_folder_that_is_the_project_hides_only_the_store_in_it(tmp_path: Path) -> None:
    """TRAINEE_DATA_DIR set to the project itself: the project stays visible (train.py
    bound again), its store and control folder do not."""
    from trainee.launch.layout import ProjectLayout
    from trainee.launch.sandbox import bwrap_argv

    root = tmp_path / "proj"
    tree(root, "train.py", "runtime.sqlite3", ".trainee/project.yaml")
    env = {"TRAINEE_DATA_DIR": str(root), "HOME": str(tmp_path / "home"), "PATH": "/usr/bin"}
    rnd = ProjectLayout.for_root(root, env).session(1).round(1)
    argv = bwrap_argv(["true"], layout=rnd, cwd=str(root), caller_env=env, devices=[], env=env)
    pairs = [(argv[i], argv[i + 1]) for i in range(len(argv) - 1)]
    assert ("--ro-bind", str(root)) in pairs and ("--tmpfs", str(root)) in pairs
    assert ("--ro-bind", str(root / "train.py")) in pairs
    assert not any(p[1] == str(root / "runtime.sqlite3") for p in pairs if "bind" in p[0])
