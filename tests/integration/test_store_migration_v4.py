"""Schema migration 4 (launch tokens, control layout) on a database version 3 left behind.

The version-3 file is made as that trainee made it: the first three migrations run with
the sqlite3 module and a round inserted with version 3's columns only. After the
migration old rows read back as launched with the old layout (their control files in
the workspace, no token); rounds written now get the control folder and keep a token.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio

from trainee.launch.layout import CONTROL_LAYOUT, ProjectLayout
from trainee.store import MIGRATIONS, SCHEMA_VERSION, RoundRecord, Store


def make_v3(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for script in MIGRATIONS[:3]:
            conn.executescript(script)
        conn.execute("PRAGMA user_version = 3")
        conn.execute(
            'INSERT INTO sessions ("index", id, project_root, status, policy, security_mode, '
            "max_rounds, created_at, updated_at) VALUES (1, 'session-0001', '/p', 'running', "
            "'random', 'guarded', 3, 1, 1)"
        )
        conn.execute(
            'INSERT INTO rounds (session, "index", status, monitor_pid, monitor_start_time) '
            "VALUES (1, 1, 'running', 4242, 99)"
        )
    finally:
        conn.close()


def test_old_rounds_keep_the_old_layout_and_new_ones_get_the_control_folder(
    tmp_path: Path,
) -> None:
    db = tmp_path / "proj" / ".trainee" / "runtime.sqlite3"
    make_v3(db)

    async def main() -> tuple[RoundRecord, RoundRecord]:
        async with await Store.open(db) as store:
            assert await store.schema_version() == SCHEMA_VERSION >= 4
            old = await store.get_round(1, 1)
            await store.upsert_round(RoundRecord(session=1, index=2))
            new = await store.update_round(1, 2, launch_token="00ff00ff00ff00ff")
            return old, new

    old, new = anyio.run(main)
    assert (old.control_layout, old.launch_token, old.monitor_pid) == (1, None, 4242)
    assert (new.control_layout, new.launch_token) == (CONTROL_LAYOUT, "00ff00ff00ff00ff")
    session = ProjectLayout.for_root(tmp_path / "proj", env={}).session(1)
    legacy = session.round(1, legacy=old.control_layout < CONTROL_LAYOUT)
    assert legacy.exit_file == legacy.dir / "exit.json"  # in the workspace, as it was
    current = session.round(2)
    assert current.exit_file == session.project.data_dir / "control" / "session-0001" / (
        "round-0002/exit.json"
    )
