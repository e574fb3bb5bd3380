"""The SQL tool: read-only queries on a real SQLite file; writes are refused and the file unchanged."""

from __future__ import annotations

import hashlib
import sqlite3
import time

import pytest

from reinforge.envs.tools.calls import ToolCall
from reinforge.envs.tools.execution import call_tool
from reinforge.envs.tools.registry import ToolRegistry
from reinforge.envs.tools.sql import format_table, sql_tool


@pytest.fixture
def db_path(tmp_path):
    path = tmp_path / "shop.db"
    connection = sqlite3.connect(path)
    connection.executescript("""
        CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT, age INTEGER);
        INSERT INTO users (name, age) VALUES ('alice', 30), ('bob', NULL), ('carol', 41);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, user_id INTEGER, total REAL);
        INSERT INTO orders (user_id, total) VALUES (1, 9.5), (1, 20.25), (3, 4.0);
    """)
    connection.commit()
    connection.close()
    return path


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def query(registry: ToolRegistry, sql: str):
    return call_tool(registry, ToolCall("sql", {"query": sql}))


def test_select_returns_a_table(db_path) -> None:
    registry = ToolRegistry([sql_tool(db_path)])
    assert registry.get("sql").description.endswith("Tables: orders(id, user_id, total); users(id, name, age).")
    result = query(registry, "SELECT u.name, SUM(o.total) AS spent FROM users u LEFT JOIN orders o "
                             "ON o.user_id = u.id GROUP BY u.id ORDER BY u.id")
    assert result.ok
    assert result.content == ("name  | spent\n"
                              "------+------\n"
                              "alice | 29.75\n"
                              "bob   | NULL\n"
                              "carol | 4.0\n"
                              "(3 rows)")
    assert query(registry, "SELECT * FROM users WHERE id > 99").content == "id | name | age\n---+------+----\n(0 rows)"


def test_row_limit(db_path) -> None:
    registry = ToolRegistry([sql_tool(db_path, max_rows=2)])
    lines = query(registry, "SELECT name FROM users ORDER BY id").content.splitlines()
    assert lines[2:4] == ["alice", "bob"] and "first 2 rows shown" in lines[4] and len(lines) == 5


@pytest.mark.parametrize("statement", [
    "INSERT INTO users (name) VALUES ('mallory')",
    "UPDATE users SET age = 0",
    "DELETE FROM users",
    "DROP TABLE users",
    "CREATE TABLE t (x)",
    "CREATE TEMP TABLE t (x)",
    "ALTER TABLE users ADD COLUMN pwned TEXT",
    "PRAGMA query_only = OFF",
    "PRAGMA journal_mode = DELETE",
    "BEGIN",
    "VACUUM",
    "REPLACE INTO users VALUES (1, 'mallory', 1)",
])
def test_writes_are_refused_and_the_file_is_unchanged(db_path, statement) -> None:
    registry = ToolRegistry([sql_tool(db_path)])
    before = digest(db_path)
    result = query(registry, statement)
    assert not result.ok and result.error.startswith("SQLToolError: query refused")
    assert "only read-only SELECT queries are allowed" in result.error
    assert digest(db_path) == before
    assert query(registry, "SELECT COUNT(*) AS n FROM users").content.splitlines()[2] == "3"


def test_attach_and_vacuum_into_cannot_create_files(db_path, tmp_path) -> None:
    registry = ToolRegistry([sql_tool(db_path)])
    before = digest(db_path)
    for statement in [f"ATTACH DATABASE '{tmp_path / 'a.db'}' AS a",
                      f"ATTACH 'file:{tmp_path / 'b.db'}?mode=rwc' AS b",
                      f"VACUUM INTO '{tmp_path / 'c.db'}'",
                      "SELECT 1; DROP TABLE users"]:
        assert not query(registry, statement).ok
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shop.db"]
    assert digest(db_path) == before


def test_runaway_query_is_stopped_by_the_time_limit(db_path) -> None:
    registry = ToolRegistry([sql_tool(db_path, timeout_s=0.3)])
    start = time.monotonic()
    result = query(registry, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c")
    assert time.monotonic() - start < 0.3 + 5  # the query never ends on its own
    assert not result.ok and result.error == "SQLToolError: query stopped: it ran longer than 0.3s"


def test_errors_name_the_problem(db_path) -> None:
    registry = ToolRegistry([sql_tool(db_path)])
    assert 'near "SELEC": syntax error' in query(registry, "SELEC 1").error
    assert "no such table: nope" in query(registry, "SELECT * FROM nope").error
    assert "the query is empty" in query(registry, "  ").error
    assert "string or blob too big" in query(registry, "SELECT randomblob(100000000)").error


def test_factory_checks_its_file(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        sql_tool(tmp_path / "missing.db")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ValueError, match="cannot read .* as a SQLite database"):
        sql_tool(junk)


def test_format_table_cells() -> None:
    table = format_table(["a", "b"], [(None, b"\x00\x01"), ("line\nbreak", "x" * 50)], more=False, max_cell_chars=16)
    assert table.splitlines() == ["a           | b",
                                  "------------+-----------------",
                                  "NULL        | <blob 2 bytes>",
                                  "line\\nbreak | xxxxxxxxxxxxx...",
                                  "(2 rows)"]
