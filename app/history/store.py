"""Conversation history in one SQLite file, written so that nothing said is lost.

Every write is its own short ``BEGIN IMMEDIATE`` transaction: the user's
message is committed before generation starts, a reply is inserted as
"in progress" (``finish_reason`` NULL), may be updated with its partial text
while it streams, and is finished at the end.  WAL mode plus
``synchronous=FULL`` means a ``kill -9`` at any moment leaves every committed
turn readable, and ``busy_timeout`` lets two tokchat processes share the file.
A reply being written carries its writer's pid; one whose writer died reads as
``"interrupted"`` at once (a read-only reader too) and is marked so the next time the
database is opened for writing.  A reply being continued is written again the same way
(:meth:`ChatStore.reopen_reply`), so a kill keeps what it had printed.

Schema changes are forward migrations keyed by ``PRAGMA user_version``; a
database from a newer tokchat is refused rather than guessed at.

Not handled here: what a message *is* (:mod:`app.conversation.session` defines
``ChatMessage``/``TurnStats``; they are read by duck typing), turning storage
failures into a notice (:class:`app.history.recorder.HistoryRecorder`), and file
formats (:mod:`app.history.export`).
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from app.history.full_disk import disk_is_full, full_disk_reason
from app.history.types import (Conversation, ConversationInfo, StoredMessage, StoreError, as_dict,
                             message_columns, make_title, parse_reply_json, reply_json)

if TYPE_CHECKING:
    from app.conversation.messages import ChatMessage

__all__ = ["ChatStore", "Conversation", "ConversationInfo", "StoredMessage", "StoreError",
           "default_db_path", "make_title", "SCHEMA_VERSION"]

DB_NAME = "history.sqlite3"
BUSY_TIMEOUT_S = 10.0

#: forward migrations: _MIGRATIONS[n] takes a database from user_version n to n + 1
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 0 -> 1: the first schema
    (
        """CREATE TABLE conversations (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            title TEXT NOT NULL DEFAULT '',
            model_path TEXT NOT NULL DEFAULT '',
            model_name TEXT NOT NULL DEFAULT '',
            template TEXT NOT NULL DEFAULT '',
            system_prompt TEXT NOT NULL DEFAULT '',
            sampling_json TEXT NOT NULL DEFAULT '{}',
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL)""",
        """CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            role TEXT NOT NULL,
            content TEXT NOT NULL DEFAULT '',
            reasoning TEXT NOT NULL DEFAULT '',
            prompt_tokens INTEGER,
            completion_tokens INTEGER,
            reasoning_tokens INTEGER,
            ttft_s REAL,
            tokens_per_s REAL,
            finish_reason TEXT,
            stats_json TEXT,
            created_at REAL NOT NULL,
            finished_at REAL)""",
        "CREATE INDEX messages_by_conversation ON messages(conversation_id, id)",
    ),
    # 1 -> 2: who is writing an unfinished reply (so a dead writer's reply can be marked
    # interrupted), the other chat settings, and an index for the newest-first list
    (
        "ALTER TABLE messages ADD COLUMN writer_pid INTEGER",
        "ALTER TABLE conversations ADD COLUMN settings_json TEXT NOT NULL DEFAULT '{}'",
        "CREATE INDEX conversations_by_update ON conversations(updated_at DESC, id DESC)",
    ),
    # 2 -> 3: tool calling: a reply's tool_calls, a tool result's tool_call_id and name (JSON)
    (
        "ALTER TABLE messages ADD COLUMN tool_json TEXT",
    ),
)
_MIGRATIONS += (
    # 3 -> 4: branches.  Each message links to the one before it on its branch (a regenerated
    # reply and the reply it replaced share a parent), and a conversation remembers the last
    # message of the branch on screen; existing conversations become one branch each.
    (
        "ALTER TABLE messages ADD COLUMN parent_id INTEGER",
        "ALTER TABLE conversations ADD COLUMN tip_id INTEGER",
        "UPDATE messages SET parent_id = (SELECT MAX(p.id) FROM messages p WHERE "
        "p.conversation_id = messages.conversation_id AND p.id < messages.id)",
        "UPDATE conversations SET tip_id = (SELECT MAX(m.id) FROM messages m WHERE m.conversation_id = conversations.id)",
    ),
)
_MIGRATIONS += (
    # 4 -> 5: steering a reply.  A reply's user-written opening and its ids as generated (JSON, so
    # /continue resumes from them), and where a fork (/fork) came from: the conversation and the
    # message it was cut after.  Old rows read as before (NULL: no opening, ids unknown, not a fork).
    (
        "ALTER TABLE messages ADD COLUMN reply_json TEXT",
        "ALTER TABLE conversations ADD COLUMN forked_from INTEGER",
        "ALTER TABLE conversations ADD COLUMN forked_at INTEGER",
    ),
)
SCHEMA_VERSION = len(_MIGRATIONS)

#: (database path, message id) of replies this process is writing right now
_ACTIVE_REPLIES: set[tuple[str, int]] = set()


class _Connection(sqlite3.Connection):
    """A connection that stores text with lone surrogates (a terminal paste of broken bytes).

    SQLite text is UTF-8 and a lone surrogate has no UTF-8 form, so sqlite3
    raises UnicodeEncodeError.  Such a character is stored as U+FFFD for each
    byte, which is also what the model saw (the tokenizer encodes it with
    ``surrogatepass`` and those bytes decode to U+FFFD).  Only a failing
    statement pays for the retry.
    """

    def execute(self, sql: str, parameters: Any = ()) -> sqlite3.Cursor:
        try:
            return super().execute(sql, parameters)
        except UnicodeEncodeError:
            return super().execute(sql, _valid_utf8(parameters))

    def executemany(self, sql: str, seq: Any) -> sqlite3.Cursor:
        rows = list(seq)
        try:
            return super().executemany(sql, rows)
        except UnicodeEncodeError:
            return super().executemany(sql, [_valid_utf8(row) for row in rows])


def _valid_utf8(parameters: Any) -> tuple:
    return tuple(p.encode("utf-8", "surrogatepass").decode("utf-8", "replace") if isinstance(p, str) else p
                 for p in parameters)


#: ``parent_id`` default of :meth:`ChatStore.add_message`: the conversation's tip
TIP = object()
_PARENT_SQL = "(SELECT tip_id FROM conversations WHERE id = ?)"


def default_db_path() -> Path:
    """``$TOKCHAT_DATA_DIR/history.sqlite3``, else the platform's user data directory."""
    override = os.environ.get("TOKCHAT_DATA_DIR")
    if override:
        return Path(override).expanduser() / DB_NAME
    import platformdirs

    return Path(platformdirs.user_data_dir("tokchat", appauthor=False)) / DB_NAME


def _pid_alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill(pid, 0) would send CTRL_C_EVENT there: assume alive
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


class ChatStore:
    """The history database.  Thread-safe; every method is one short transaction.

    Raises :class:`StoreError` (one line) when the file cannot be opened,
    read or written: a read-only directory, a full disk, a database from a
    newer tokchat.

    ``readonly``: for reading only (export, list): the file is opened read-only, so a
    read-only file or directory works; nothing is created, migrated or recovered.
    """

    def __init__(self, path: str | Path | None = None, *, timeout_s: float = BUSY_TIMEOUT_S,
                 readonly: bool = False) -> None:
        self.path = Path(path).expanduser() if path is not None else default_db_path()
        self._key = str(self.path.resolve())  # one spelling per file, for _ACTIVE_REPLIES
        self._lock = threading.RLock()
        self.readonly = readonly
        if readonly:
            self._conn = self._open_readonly(timeout_s)
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError as exc:
            raise StoreError(f"cannot create the history directory {self.path.parent}: "
                             "a file of that name is in the way") from exc
        except OSError as exc:
            raise self._error(exc) if disk_is_full(exc, self.path) else \
                StoreError(f"cannot create the history directory {self.path.parent}: {exc.strerror or exc}") from exc
        try:
            self._conn = sqlite3.connect(self.path, timeout=timeout_s, isolation_level=None,
                                         check_same_thread=False, factory=_Connection)
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        try:
            self._conn.row_factory = sqlite3.Row
            self._use_wal(timeout_s)
            # FULL: each commit is on disk, not only safe from a killed process
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._migrate()
            self._recover_dead_replies()
        except StoreError:
            self._conn.close()
            raise
        except sqlite3.Error as exc:
            self._conn.close()
            raise self._error(exc) from exc

    # -- plumbing ---------------------------------------------------------------------------

    def _open_readonly(self, timeout_s: float) -> sqlite3.Connection:
        """A read-only connection: ``mode=ro``, else ``immutable=1`` when SQLite cannot make
        the WAL's shared-memory file beside a read-only database (nobody can write it then)."""
        from urllib.parse import quote

        if not self.path.is_file():
            raise StoreError(f"history database {self.path}: does not exist (nothing recorded yet)")
        uri = "file:" + quote(str(self.path.resolve()))
        last: sqlite3.Error | None = None
        for flags in ("?mode=ro", "?mode=ro&immutable=1"):
            try:
                conn = sqlite3.connect(uri + flags, uri=True, timeout=timeout_s, isolation_level=None,
                                       check_same_thread=False, factory=_Connection)
            except sqlite3.Error as exc:
                last = exc
                continue
            try:
                conn.row_factory = sqlite3.Row
                version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            except sqlite3.Error as exc:
                conn.close()
                last = exc
                continue
            if version != SCHEMA_VERSION:
                conn.close()
                newer = version > SCHEMA_VERSION
                raise StoreError(f"history database {self.path} has schema version {version}, "
                                 + (f"newer than this tokchat ({SCHEMA_VERSION}): upgrade tokchat" if newer else
                                    f"older than this tokchat's {SCHEMA_VERSION}: run tokchat once with write "
                                    "access to it to upgrade it"))
            return conn
        assert last is not None
        raise self._error(last) from last

    def _use_wal(self, timeout_s: float) -> None:
        """Switch the file to WAL, waiting out another process that is opening it too.

        The switch needs the file to itself, and SQLite answers "database is
        locked" at once instead of calling the busy handler when another
        connection is opening or migrating the same new file (seen in CI with two
        processes started together).  So it is retried here until the same
        busy timeout as every other statement runs out.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                busy = "locked" in str(exc) or "busy" in str(exc)
                if not busy or time.monotonic() >= deadline:
                    raise
            time.sleep(0.02)

    def _error(self, exc: BaseException) -> StoreError:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "readonly" in reason or "read-only" in reason:
            reason = "the file or its directory is read-only"
        elif disk_is_full(exc, self.path):  # SQLite may say "disk I/O error" for it (app.history.full_disk)
            reason = full_disk_reason(self.path)
        return StoreError(f"history database {self.path}: {reason}")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: the write lock is taken up front, so two
        processes queue on busy_timeout instead of failing on a lock upgrade."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._error(exc) from exc
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException as exc:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise self._error(exc) from exc
                raise

    def _read(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise self._error(exc) from exc

    @property
    def schema_version(self) -> int:
        return int(self._read("PRAGMA user_version")[0][0])

    def _migrate(self) -> None:
        if self.schema_version == SCHEMA_VERSION:
            return
        with self._write() as conn:
            # re-read under the write lock: another process may have migrated meanwhile
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise StoreError(f"history database {self.path} has schema version {version}, newer "
                                 f"than this tokchat ({SCHEMA_VERSION}): upgrade tokchat")
            for step in _MIGRATIONS[version:]:
                for statement in step:
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _writer_gone(self, msg_id: int, writer_pid: int | None) -> bool:
        """Whether the reply ``msg_id``, written by ``writer_pid``, has lost its writer (so it was cut):
        a process that is gone, or this one when it is not writing that reply now."""
        if writer_pid is None:
            return False
        if (self._key, msg_id) in _ACTIVE_REPLIES:
            return False
        return writer_pid == os.getpid() or not _pid_alive(writer_pid)

    def _recover_dead_replies(self) -> None:
        """Mark replies whose writing process is gone as interrupted."""
        rows = self._read("SELECT id, writer_pid FROM messages WHERE writer_pid IS NOT NULL")
        dead = [r["id"] for r in rows if self._writer_gone(r["id"], r["writer_pid"])]
        if dead:
            with self._write() as conn:
                conn.executemany("UPDATE messages SET finish_reason = 'interrupted', writer_pid = NULL "
                                 "WHERE id = ? AND writer_pid IS NOT NULL", [(i,) for i in dead])

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> ChatStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def integrity_check(self) -> str:
        """SQLite's own verdict on the file: ``"ok"`` when it is consistent."""
        return "; ".join(str(r[0]) for r in self._read("PRAGMA integrity_check"))

    # -- conversations ----------------------------------------------------------------------

    def new_conversation(self, model: str | Path = "", template: str = "", system: str = "",
                         sampling: Any = None, *, model_name: str = "", settings: dict | None = None,
                         title: str = "", created_at: float | None = None) -> int:
        """Start a conversation; its title comes from the first user message unless given."""
        now = time.time() if created_at is None else created_at
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO conversations (title, model_path, model_name, template, system_prompt,"
                " sampling_json, settings_json, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?)",
                (title, str(model or ""), model_name, template, system,
                 json.dumps(as_dict(sampling) or {}), json.dumps(settings or {}), now, now))
            return _row_id(cur)

    def update_conversation(self, conv_id: int, *, system: str | None = None,
                            template: str | None = None, sampling: Any = None,
                            model: str | Path | None = None, model_name: str | None = None,
                            settings: dict | None = None) -> None:
        """Change the settings a conversation continues with (``/system``, ``/model``, ``--switch-model``);
        ``settings`` replaces the stored ones whole (the caller merges)."""
        sets, params = [], []
        for column, value in (("system_prompt", system), ("template", template),
                              ("model_path", None if model is None else str(model)), ("model_name", model_name)):
            if value is not None:
                sets.append(f"{column} = ?")
                params.append(value)
        if sampling is not None:
            sets.append("sampling_json = ?")
            params.append(json.dumps(as_dict(sampling)))
        if settings is not None:
            sets.append("settings_json = ?")
            params.append(json.dumps(settings))
        if sets:
            with self._write() as conn:
                self._require(conn, conv_id)
                conn.execute(f"UPDATE conversations SET {', '.join(sets)} WHERE id = ?", (*params, conv_id))

    def _require(self, conn: sqlite3.Connection, conv_id: int) -> None:
        if conn.execute("SELECT 1 FROM conversations WHERE id = ?", (conv_id,)).fetchone() is None:
            raise StoreError(f"no conversation {conv_id} in the history (see `tokchat export --list`)")

    def rename(self, conv_id: int, title: str) -> None:
        with self._write() as conn:
            self._require(conn, conv_id)
            conn.execute("UPDATE conversations SET title = ? WHERE id = ?", (title.strip(), conv_id))

    def delete(self, conv_id: int) -> None:
        with self._write() as conn:
            self._require(conn, conv_id)
            conn.execute("DELETE FROM messages WHERE conversation_id = ?", (conv_id,))
            conn.execute("DELETE FROM conversations WHERE id = ?", (conv_id,))

    def exists(self, conv_id: int) -> bool:
        """Whether conversation ``conv_id`` is stored (another window may have deleted it)."""
        return bool(self._read("SELECT 1 FROM conversations WHERE id = ?", (conv_id,)))

    def restore(self, conversation: Conversation) -> None:
        """Put a deleted conversation back with its own ids (undoing a delete).

        The same ids, not new ones, so that forks naming it (``forked_from``) and a chat
        still recording into it find it again; ids are never reused (AUTOINCREMENT), so
        they are free.  A reply that was still being written is put back as interrupted.
        """
        info = conversation.info
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM conversations WHERE id = ?", (info.id,)).fetchone() is not None:
                raise StoreError(f"history database {self.path}: conversation {info.id} is already there")
            conn.execute(
                "INSERT INTO conversations (id, title, model_path, model_name, template, system_prompt,"
                " sampling_json, settings_json, created_at, updated_at, forked_from, forked_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (info.id, info.title, info.model_path, info.model_name, info.template, info.system_prompt,
                 json.dumps(info.sampling), json.dumps(info.settings), info.created_at, info.updated_at,
                 info.forked_from, info.forked_at))
            for m in sorted(conversation.messages + conversation.branches, key=lambda m: m.id):
                unfinished = m.finish_reason is None and m.role != "user"
                conn.execute(
                    "INSERT INTO messages (id, conversation_id, role, content, reasoning, prompt_tokens,"
                    " completion_tokens, reasoning_tokens, ttft_s, tokens_per_s, finish_reason, stats_json,"
                    " created_at, finished_at, tool_json, parent_id, reply_json)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (m.id, info.id, m.role, m.content, m.reasoning, m.prompt_tokens, m.completion_tokens,
                     m.reasoning_tokens, m.ttft_s, m.tokens_per_s, "interrupted" if unfinished else m.finish_reason,
                     json.dumps(m.stats) if m.stats is not None else None, m.created_at,
                     m.finished_at if m.finished_at is not None or not unfinished else m.created_at,
                     json.dumps(m.tool, ensure_ascii=False) if m.tool else None, m.parent_id,
                     reply_json(m.opening, m.reply_ids)))
            tip = conversation.messages[-1].id if conversation.messages else None
            conn.execute("UPDATE conversations SET tip_id = ? WHERE id = ?", (tip, info.id))

    def list_conversations(self, search: str | None = None, limit: int | None = None) -> list[ConversationInfo]:
        """Newest first (by last activity); ``search`` matches titles, messages and reasoning."""
        sql = ("SELECT c.*, (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id) AS n, "
               "(c.forked_from IS NOT NULL AND NOT EXISTS (SELECT 1 FROM conversations s WHERE s.id = c.forked_from)) "
               "AS source_deleted FROM conversations c")
        params: list = []
        if search:
            pattern = "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            sql += (" WHERE c.title LIKE ? ESCAPE '\\' OR EXISTS (SELECT 1 FROM messages m WHERE "
                    "m.conversation_id = c.id AND (m.content LIKE ? ESCAPE '\\' OR m.reasoning LIKE ? ESCAPE '\\'))")
            params = [pattern] * 3
        sql += " ORDER BY c.updated_at DESC, c.id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [self._info(r) for r in self._read(sql, tuple(params))]

    def being_written(self) -> set[int]:
        """The conversations holding a reply whose writer is alive now (another window, or this process):
        the history list marks them, as opening one shows that reply as unsettled."""
        rows = self._read("SELECT id, conversation_id, writer_pid FROM messages "
                          "WHERE writer_pid IS NOT NULL AND finish_reason IS NULL")
        return {r["conversation_id"] for r in rows if not self._writer_gone(r["id"], r["writer_pid"])}

    def last_conversation_id(self) -> int | None:
        found = self.list_conversations(limit=1)
        return found[0].id if found else None

    @staticmethod
    def _info(row: sqlite3.Row) -> ConversationInfo:
        return ConversationInfo(
            id=row["id"], title=row["title"], model_path=row["model_path"], model_name=row["model_name"],
            template=row["template"], system_prompt=row["system_prompt"],
            sampling=json.loads(row["sampling_json"]), settings=json.loads(row["settings_json"]),
            created_at=row["created_at"], updated_at=row["updated_at"],
            message_count=row["n"] if "n" in row.keys() else 0,
            forked_from=row["forked_from"], forked_at=row["forked_at"],
            source_deleted=bool(row["source_deleted"]) if "source_deleted" in row.keys() else False)

    def load(self, conv_id: int) -> Conversation:
        rows = self._read("SELECT c.*, (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id) AS n "
                          "FROM conversations c WHERE c.id = ?", (conv_id,))
        if not rows:
            raise StoreError(f"no conversation {conv_id} in the history (see `tokchat export --list`)")
        stored = {
            r["id"]: StoredMessage(
                id=r["id"], role=r["role"], content=r["content"], reasoning=r["reasoning"],
                # a reply whose writer died reads as cut even before a writer opens the file to mark it
                # (a read-only reader never does): NULL stays only for one being written now
                finish_reason=r["finish_reason"] or ("interrupted" if self._writer_gone(r["id"], r["writer_pid"])
                                                     else None),
                prompt_tokens=r["prompt_tokens"],
                completion_tokens=r["completion_tokens"], reasoning_tokens=r["reasoning_tokens"],
                ttft_s=r["ttft_s"], tokens_per_s=r["tokens_per_s"],
                stats=json.loads(r["stats_json"]) if r["stats_json"] else None,
                created_at=r["created_at"], finished_at=r["finished_at"],
                tool=json.loads(r["tool_json"]) if r["tool_json"] else None, parent_id=r["parent_id"],
                **_reply_fields(r["reply_json"]))
            for r in self._read("SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conv_id,))
        }
        with self._lock:
            path = self._path(self._conn, conv_id)
        # another process may add a message between the two reads: the conversation is what the first read saw
        path = [i for i in path if i in stored]
        on_path = set(path)
        return Conversation(self._info(rows[0]), [stored[i] for i in path],
                            [m for i, m in stored.items() if i not in on_path])

    # -- messages ---------------------------------------------------------------------------

    def add_message(self, conv_id: int, message: ChatMessage, *, created_at: float | None = None,
                    finished_at: float | None = None, parent_id: int | None | object = TIP) -> int:
        """Commit a whole message (the user's, before generation starts).

        ``parent_id``: the message it follows; by default the conversation's tip.  A chat that
        writes turns passes its own last message, so two processes on one conversation each
        extend their own branch instead of following each other's messages."""
        cols = message_columns(message, None)
        now = time.time()
        created = now if created_at is None else created_at
        finished = finished_at if finished_at is not None else (now if cols["finish_reason"] or
                                                                   cols["role"] != "assistant" else None)
        with self._write() as conn:
            self._require(conn, conv_id)
            cur = conn.execute(
                f"INSERT INTO messages (conversation_id, {', '.join(cols)}, created_at, finished_at, parent_id) "
                f"VALUES (?, {', '.join('?' * len(cols))}, ?, ?, {_PARENT_SQL if parent_id is TIP else '?'})",
                (conv_id, *cols.values(), created, finished, conv_id if parent_id is TIP else parent_id))
            msg_id = _row_id(cur)
            conn.execute("UPDATE conversations SET tip_id = ? WHERE id = ?", (msg_id, conv_id))
            self._touch(conn, conv_id, now, cols["role"], cols["content"])
            return msg_id

    def _touch(self, conn: sqlite3.Connection, conv_id: int, now: float, role: str | None = None,
               content: str = "") -> None:
        conn.execute("UPDATE conversations SET updated_at = MAX(updated_at, ?) WHERE id = ?", (now, conv_id))
        if role == "user":
            conn.execute("UPDATE conversations SET title = ? WHERE id = ? AND title = ''",
                         (make_title(content), conv_id))

    def begin_reply(self, conv_id: int, role: str = "assistant", *, parent_id: int | None | object = TIP) -> int:
        """Insert a reply that is being generated (finish_reason NULL) and return its id
        (``parent_id`` as in :meth:`add_message`)."""
        now = time.time()
        with self._write() as conn:
            self._require(conn, conv_id)
            cur = conn.execute("INSERT INTO messages (conversation_id, role, created_at, writer_pid, parent_id) "
                               f"VALUES (?, ?, ?, ?, {_PARENT_SQL if parent_id is TIP else '?'})",
                               (conv_id, role, now, os.getpid(), conv_id if parent_id is TIP else parent_id))
            self._touch(conn, conv_id, now)
            msg_id = _row_id(cur)
            conn.execute("UPDATE conversations SET tip_id = ? WHERE id = ?", (msg_id, conv_id))
        _ACTIVE_REPLIES.add((self._key, msg_id))
        return msg_id

    def reopen_reply(self, msg_id: int, opening: str = "") -> None:
        """A stored reply is being continued (/continue, ``--resume N --continue``): it is written again, as
        :meth:`begin_reply` writes a new one.  Until :meth:`finish_message` it has this process as its
        writer and no finish reason, so the partial saves (:meth:`update_reply`) reach it and a kill leaves
        it interrupted with the text saved so far.  Its stats and ids as generated are dropped meanwhile:
        they describe the shorter reply, and a reply cut mid-way is continued from its text (only
        ``opening``, the user's start, is kept)."""
        columns = ("finish_reason", "finished_at", "stats_json", "prompt_tokens", "completion_tokens",
                   "reasoning_tokens", "ttft_s", "tokens_per_s")
        with self._write() as conn:
            row = conn.execute("SELECT conversation_id FROM messages WHERE id = ?", (msg_id,)).fetchone()
            if row is None:
                raise StoreError(f"history database {self.path}: no message {msg_id}")
            conn.execute(f"UPDATE messages SET {', '.join(f'{c} = NULL' for c in columns)}, reply_json = ?, "
                         "writer_pid = ? WHERE id = ?",
                         (json.dumps({"opening": opening}, ensure_ascii=False) if opening else None, os.getpid(),
                          msg_id))
            self._touch(conn, row["conversation_id"], time.time())
        _ACTIVE_REPLIES.add((self._key, msg_id))

    def update_reply(self, msg_id: int, content: str, reasoning: str = "") -> None:
        """Save the partial text of a reply still being generated."""
        with self._write() as conn:
            conn.execute("UPDATE messages SET content = ?, reasoning = ? WHERE id = ? AND writer_pid IS NOT NULL",
                         (content, reasoning, msg_id))

    def finish_message(self, msg_id: int, message: ChatMessage, finish_reason: str | None = None) -> None:
        """Commit a reply's final text and stats; ``finish_reason`` overrides the message's own
        (``"interrupted"`` for a reply cut off by an error or exit)."""
        cols = message_columns(message, finish_reason)
        cols["finish_reason"] = cols["finish_reason"] or "stop"
        now = time.time()
        with self._write() as conn:
            row = conn.execute("SELECT conversation_id FROM messages WHERE id = ?", (msg_id,)).fetchone()
            if row is None:
                raise StoreError(f"history database {self.path}: no message {msg_id}")
            sets = ", ".join(f"{name} = ?" for name in cols)
            conn.execute(f"UPDATE messages SET {sets}, finished_at = ?, writer_pid = NULL WHERE id = ?",
                         (*cols.values(), now, msg_id))
            self._touch(conn, row["conversation_id"], now)
        _ACTIVE_REPLIES.discard((self._key, msg_id))

    def truncate(self, conv_id: int, keep: int) -> None:
        """Show only the first ``keep`` messages of the shown branch (before a regenerate or an edit
        of the last turn); the rest stays stored as a branch, and the next message is its sibling."""
        with self._write() as conn:
            self._require(conn, conv_id)
            path = self._path(conn, conv_id)
            tip = path[min(keep, len(path)) - 1] if keep > 0 and path else None
            conn.execute("UPDATE conversations SET tip_id = ? WHERE id = ?", (tip, conv_id))

    def tip_id(self, conv_id: int) -> int | None:
        """The last message of the branch a resume shows (the newest written or chosen)."""
        rows = self._read("SELECT tip_id FROM conversations WHERE id = ?", (conv_id,))
        if not rows:
            raise StoreError(f"no conversation {conv_id} in the history (see `tokchat export --list`)")
        return rows[0][0]

    def show_branch(self, conv_id: int, tip_id: int | None) -> None:
        """Make the branch ending at message ``tip_id`` the one shown (a sibling was chosen)."""
        with self._write() as conn:
            self._require(conn, conv_id)
            if tip_id is not None and conn.execute("SELECT 1 FROM messages WHERE id = ? AND conversation_id = ?",
                                                   (tip_id, conv_id)).fetchone() is None:
                raise StoreError(f"history database {self.path}: no message {tip_id} in conversation {conv_id}")
            conn.execute("UPDATE conversations SET tip_id = ? WHERE id = ?", (tip_id, conv_id))

    @staticmethod
    def _path(conn: sqlite3.Connection, conv_id: int) -> list[int]:
        """Message ids of the shown branch, first to last (walked from the tip along parent links)."""
        tip = conn.execute("SELECT tip_id FROM conversations WHERE id = ?", (conv_id,)).fetchone()[0]
        parents = dict(conn.execute("SELECT id, parent_id FROM messages WHERE conversation_id = ?",
                                    (conv_id,)).fetchall())
        path: list[int] = []
        while tip is not None and tip in parents and len(path) <= len(parents):
            path.append(tip)
            tip = parents[tip]
        return path[::-1]

    def import_conversation(self, info: ConversationInfo, messages: list[StoredMessage],
                            branches: Sequence[StoredMessage] = ()) -> int:
        """Insert a whole conversation (from an export) in one transaction; returns its new id.

        ``messages`` is the shown branch; ``branches`` the other messages, linked by ``id`` and
        ``parent_id`` as exported (a message without ids follows the one before it).
        """
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO conversations (title, model_path, model_name, template, system_prompt,"
                " sampling_json, settings_json, created_at, updated_at, forked_from, forked_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                # a fork link names rows of the database it was exported from, kept as it was
                (info.title, info.model_path, info.model_name, info.template, info.system_prompt,
                 json.dumps(info.sampling), json.dumps(info.settings), info.created_at, info.updated_at,
                 info.forked_from, info.forked_at))
            conv_id = _row_id(cur)
            new_ids: dict[int, int] = {}  # exported id -> id here
            previous: int | None = None
            tip: int | None = None
            ordered = [(m, True) for m in messages] + [(m, False) for m in branches]
            if any(m.id for m, _ in ordered):  # parents before children, as they were written
                ordered.sort(key=lambda pair: pair[0].id or 0)
            for m, shown in ordered:
                parent = new_ids.get(m.parent_id) if m.parent_id else (None if m.id else previous)
                cur = conn.execute(
                    "INSERT INTO messages (conversation_id, role, content, reasoning, prompt_tokens,"
                    " completion_tokens, reasoning_tokens, ttft_s, tokens_per_s, finish_reason, stats_json,"
                    " created_at, finished_at, tool_json, parent_id, reply_json)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (conv_id, m.role, m.content, m.reasoning, m.prompt_tokens, m.completion_tokens,
                     m.reasoning_tokens, m.ttft_s, m.tokens_per_s, m.finish_reason,
                     json.dumps(m.stats) if m.stats is not None else None, m.created_at, m.finished_at,
                     json.dumps(m.tool, ensure_ascii=False) if m.tool else None, parent,
                     reply_json(m.opening, m.reply_ids)))
                new_id = _row_id(cur)
                if m.id:
                    new_ids[m.id] = new_id
                previous = new_id
                if shown and (messages and m is messages[-1]):
                    tip = new_id
            conn.execute("UPDATE conversations SET tip_id = ? WHERE id = ?", (tip, conv_id))
            return conv_id

    def fork(self, conv_id: int, at_message_id: int | None, *, title: str = "") -> int:
        """A new conversation holding the branch of ``conv_id`` up to message ``at_message_id`` (its
        path from the first message), linked to where it came from; returns its id.

        ``at_message_id`` None: only the settings and system prompt (a fork before the first message).
        """
        now = time.time()
        with self._write() as conn:
            self._require(conn, conv_id)
            parents = dict(conn.execute("SELECT id, parent_id FROM messages WHERE conversation_id = ?",
                                        (conv_id,)).fetchall())
            if at_message_id is not None and at_message_id not in parents:
                raise StoreError(f"history database {self.path}: no message {at_message_id} in "
                                 f"conversation {conv_id}")
            path: list[int] = []
            node = at_message_id
            while node is not None and len(path) <= len(parents):
                path.append(node)
                node = parents.get(node)
            path.reverse()
            source = conn.execute("SELECT * FROM conversations WHERE id = ?", (conv_id,)).fetchone()
            cur = conn.execute(
                "INSERT INTO conversations (title, model_path, model_name, template, system_prompt, sampling_json,"
                " settings_json, created_at, updated_at, forked_from, forked_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (title or f"{source['title'] or '(untitled)'} (fork)", source["model_path"], source["model_name"],
                 source["template"], source["system_prompt"], source["sampling_json"], source["settings_json"],
                 now, now, conv_id, at_message_id))
            new_conv = _row_id(cur)
            columns = ("role, content, reasoning, prompt_tokens, completion_tokens, reasoning_tokens, ttft_s,"
                       " tokens_per_s, finish_reason, stats_json, created_at, finished_at, tool_json, reply_json")
            parent: int | None = None
            for old_id in path:
                cur = conn.execute(f"INSERT INTO messages (conversation_id, {columns}, parent_id) SELECT ?, "
                                   f"{columns}, ? FROM messages WHERE id = ?", (new_conv, parent, old_id))
                parent = _row_id(cur)
            # a reply still being written elsewhere is copied as it stands, finished as interrupted
            conn.execute("UPDATE messages SET finish_reason = 'interrupted', finished_at = ? WHERE conversation_id = ?"
                         " AND role != 'user' AND finish_reason IS NULL", (now, new_conv))
            conn.execute("UPDATE conversations SET tip_id = ? WHERE id = ?", (parent, new_conv))
            return new_conv


def _row_id(cur: sqlite3.Cursor) -> int:
    """The id SQLite gave the row ``cur`` just inserted."""
    assert cur.lastrowid is not None  # set by every INSERT
    return cur.lastrowid


def _reply_fields(reply_json: str | None) -> dict[str, Any]:
    """A stored reply's ``opening`` and ``reply_ids`` (its ``reply_json`` column), as StoredMessage's fields."""
    opening, reply_ids = parse_reply_json(reply_json)
    return {"opening": opening, "reply_ids": reply_ids}
