"""Migration scripts: statement splitting keeps trigger bodies whole; every script parses."""

from __future__ import annotations

import sqlite3

import pytest

from trainee.store.migrations import MIGRATIONS, SCHEMA_VERSION, is_busy, split_statements


def test_split_keeps_triggers_whole() -> None:
    script = """
    CREATE TABLE t (a TEXT DEFAULT ';');
    CREATE TRIGGER t_no_update BEFORE UPDATE ON t
    BEGIN
        SELECT RAISE(ABORT, 'no; never');
    END;
    INSERT INTO t VALUES ('x;y');
    """
    statements = split_statements(script)
    assert len(statements) == 3
    assert statements[1].startswith("CREATE TRIGGER") and statements[1].endswith("END;")
    assert statements[2] == "INSERT INTO t VALUES ('x;y');"


def test_split_refuses_an_unfinished_statement() -> None:
    with pytest.raises(ValueError, match="incomplete SQL statement"):
        split_statements("CREATE TABLE a (x); CREATE TRIGGER t AFTER INSERT ON a BEGIN SELECT 1;")
    with pytest.raises(ValueError, match="incomplete SQL statement"):
        split_statements("INSERT INTO a VALUES ('unterminated; string);")
    assert split_statements("CREATE TABLE a (x); CREATE TABLE b (y)") == [
        "CREATE TABLE a (x);",
        "CREATE TABLE b (y);",
    ]
    assert split_statements("  ;\n;  ") == []


def test_every_migration_applies_in_order_to_an_empty_database() -> None:
    assert SCHEMA_VERSION == len(MIGRATIONS) >= 1
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    for script in MIGRATIONS:
        for statement in split_statements(script):
            conn.execute(statement)
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert {"sessions", "rounds", "decisions", "metric_points", "events"} <= names
    assert "projects" not in names
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    conn.close()


def test_is_busy_tells_lock_errors_apart() -> None:
    assert is_busy(sqlite3.OperationalError("database is locked"))
    assert not is_busy(sqlite3.OperationalError("no such table: x"))
