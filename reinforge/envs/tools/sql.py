"""A SQL tool: read-only queries on a real SQLite file, results as a small text table.

Four independent locks keep the file unchanged whatever the model writes:
- the file is opened read-only (`mode=ro` URI), so SQLite itself refuses to write it;
- `PRAGMA query_only=ON` refuses every statement that would change a database;
- an authorizer allows only reading (SELECT, reading columns, functions, recursive CTEs and a
  few read-only PRAGMAs): INSERT, UPDATE, DELETE, DROP, CREATE, ATTACH, transactions... are
  refused before they run, ATTACH included (which could otherwise open another file read-write);
- a fresh connection per call, so nothing a query does lasts to the next one.

A progress handler stops a query that runs past its time limit (a runaway recursive CTE, a huge
cross join); only the first `max_rows` rows are ever fetched.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from reinforge.envs.tools.registry import Tool, tool_from_function

_ALLOWED_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
_READ_ONLY_PRAGMAS = {"table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
                      "foreign_key_list", "database_list", "collation_list", "function_list"}
_PROGRESS_EVERY = 1000  # SQLite virtual-machine steps between time checks
_MAX_VALUE_BYTES = 10_000_000  # the longest string or blob a query may build (randomblob(1e9)...)


class SQLToolError(RuntimeError):
    """The query was refused, failed, or ran out of time; the message says which."""


def _authorize(action: int, arg1: str | None, arg2: str | None, db_name: str | None, trigger: str | None) -> int:
    if action in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    # these pragmas only report; their argument (arg2) is a table or index name, never a new value
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _READ_ONLY_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _connect(db_path: Path, timeout_s: float) -> sqlite3.Connection:
    # Path.as_uri percent-encodes the path, so '?', '#' or spaces in it cannot smuggle URI options.
    connection = sqlite3.connect(f"{db_path.as_uri()}?mode=ro", uri=True, timeout=timeout_s)
    connection.execute("PRAGMA query_only=ON")
    connection.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _MAX_VALUE_BYTES)
    connection.set_authorizer(_authorize)
    deadline = time.monotonic() + timeout_s
    connection.set_progress_handler(lambda: int(time.monotonic() > deadline), _PROGRESS_EVERY)
    return connection


def _cell(value: object, max_chars: int) -> str:
    if value is None:
        text = "NULL"
    elif isinstance(value, bytes):
        text = f"<blob {len(value)} bytes>"
    else:
        text = str(value).replace("\n", "\\n")
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


def format_table(columns: list[str], rows: list[tuple], *, more: bool, max_cell_chars: int) -> str:
    """Rows as an aligned text table with a footer that says how many rows there were."""
    header = [_cell(c, max_cell_chars) for c in columns]
    body = [[_cell(v, max_cell_chars) for v in row] for row in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = [" | ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in [header, *body]]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    if more:
        lines.append(f"(first {len(rows)} rows shown; the query returned more: add LIMIT or aggregate)")
    else:
        lines.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")
    return "\n".join(lines)


def _run_query(db_path: Path, query: str, *, timeout_s: float, max_rows: int, max_cell_chars: int) -> str:
    if not query.strip():
        raise SQLToolError("the query is empty")
    connection = _connect(db_path, timeout_s)
    try:
        cursor = connection.execute(query)
        if cursor.description is None:
            raise SQLToolError("the statement returned no rows; only read-only SELECT queries are allowed")
        columns = [d[0] for d in cursor.description]
        rows = cursor.fetchmany(max_rows + 1)
    except sqlite3.DatabaseError as e:
        message = str(e)
        if message == "interrupted":
            raise SQLToolError(f"query stopped: it ran longer than {timeout_s:g}s") from None
        if "authoriz" in message or "readonly" in message or "read-only" in message:
            raise SQLToolError(f"query refused ({message}): only read-only SELECT queries are allowed") from None
        raise SQLToolError(f"{type(e).__name__}: {message}") from None
    except sqlite3.Error as e:  # e.g. ProgrammingError: more than one statement
        raise SQLToolError(f"{type(e).__name__}: {e}") from None
    finally:
        connection.close()
    return format_table(columns, rows[:max_rows], more=len(rows) > max_rows, max_cell_chars=max_cell_chars)


def _describe_schema(db_path: Path, max_chars: int = 1500) -> str:
    connection = _connect(db_path, timeout_s=5.0)
    try:
        tables = [r[0] for r in connection.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        parts = []
        for table in tables:
            quoted = '"' + table.replace('"', '""') + '"'
            columns = [r[1] for r in connection.execute(f"PRAGMA table_info({quoted})")]
            parts.append(f"{table}({', '.join(columns)})")
    finally:
        connection.close()
    text = "; ".join(parts) or "(no tables)"
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


def sql_tool(db_path: str | Path, *, max_rows: int = 50, timeout_s: float = 2.0, max_cell_chars: int = 80) -> Tool:
    """The `sql` tool on the SQLite file `db_path`; its description lists the tables and columns."""
    path = Path(db_path).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(f"sql tool: database file {str(db_path)!r} does not exist (option db_path)")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise ValueError(f"sql tool: max_rows must be a positive integer, got {max_rows!r}")
    if isinstance(max_cell_chars, bool) or not isinstance(max_cell_chars, int) or max_cell_chars < 4:
        raise ValueError(f"sql tool: max_cell_chars must be an integer >= 4, got {max_cell_chars!r}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise ValueError(f"sql tool: timeout_s must be a positive number, got {timeout_s!r}")
    try:
        tables = _describe_schema(path)
    except sqlite3.Error as e:
        raise ValueError(f"sql tool: cannot read {str(path)!r} as a SQLite database: {e}") from None

    def sql(query: str) -> str:
        """Run one read-only SQL (SQLite) SELECT query and return the resulting rows as a table.

        Args:
            query: a single SELECT statement.
        """
        return _run_query(path, query, timeout_s=timeout_s, max_rows=max_rows, max_cell_chars=max_cell_chars)

    tool = tool_from_function(sql, timeout_s=timeout_s + 5.0)  # the progress handler stops queries first
    description = f"{tool.description} Tables: {tables}."
    return Tool(name=tool.name, description=description, parameters=tool.parameters, fn=tool.fn,
                timeout_s=tool.timeout_s)
