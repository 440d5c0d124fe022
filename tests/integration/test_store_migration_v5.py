"""Schema migration 5 on a database version 4 left behind: the unused ``projects`` table
goes (the daemon's projects.json is the one list of known projects), nothing else does."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio

from trainee.store import MIGRATIONS, SCHEMA_VERSION, Store


def test_the_projects_table_goes_and_the_sessions_stay(tmp_path: Path) -> None:
    db = tmp_path / "proj" / ".trainee" / "runtime.sqlite3"
    db.parent.mkdir(parents=True)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        for script in MIGRATIONS[:4]:
            conn.executescript(script)
        conn.execute("PRAGMA user_version = 4")
        conn.execute(
            "INSERT INTO projects (root, spec, created_at, updated_at) VALUES ('/p', '{}', 1, 1)"
        )
        conn.execute(
            'INSERT INTO sessions ("index", id, project_root, status, policy, security_mode, '
            "max_rounds, created_at, updated_at) VALUES (1, 'session-0001', '/p', 'finished', "
            "'random', 'guarded', 3, 1, 1)"
        )
    finally:
        conn.close()

    async def main() -> str:
        async with await Store.open(db) as store:
            assert await store.schema_version() == SCHEMA_VERSION >= 5
            return (await store.get_session(1)).id

    assert anyio.run(main) == "session-0001"
    conn = sqlite3.connect(db)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()
    assert "projects" not in tables and "sessions" in tables
