"""Full-text search over sessions' titles and turns: one interface, an engine per database.

SQLite (the embedded default) searches FTS5 tables that triggers keep in step with the
turn and session tables, so rows written by bulk_create (the importer's writer sends no
signals) are indexed like any other. PostgreSQL searches expression GIN indexes with
websearch_to_tsquery, ranks with ts_rank and cuts snippets with ts_headline: an index on
an expression is always in step. `install` sets either up; a migration and every
`migrate` call it, because SQLite drops a table's triggers whenever a migration rebuilds
that table (Django rebuilds it to add a column with a default).

Both engines read the reader's words the same way (websearch_to_tsquery's syntax):
words must all appear, "quoted words" as a phrase, `or` between alternatives, -word
excluded. Raw FTS5 syntax is never passed through: every word is quoted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html import escape

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet
from django.utils.safestring import SafeString, mark_safe

from sessions.models import Session, Turn

# Marks around matched words in snippets, replaced by <mark> once the text is escaped.
START, STOP = "\x02", "\x03"
MARKED = re.compile(f"{START}(.*?){STOP}", re.S)
EMPHASIS = re.compile(r"\*\*|__|^#+ ")
CODE = re.compile(r"`([^`]+)`")
# The most sessions a search ranks, and matching turns shown under each.
MAX_SESSIONS = 500
TURNS_PER_SESSION = 3
# PostgreSQL's tsvector holds at most 1 MB; the first 100,000 characters of a turn (a
# long tool output) always fit, whatever the words.
PG_TEXT_LIMIT = 100_000


@dataclass
class TurnHit:
    number: int
    role: str
    snippet: SafeString
    # The turn in its session: the page that holds it, scrolled to it.
    url: str


@dataclass
class SessionHit:
    session: Session
    title: SafeString
    matches: list[TurnHit] = field(default_factory=list)
    # Matching turns beyond the ones shown.
    more: int = 0


def highlighted(text: str, markdown: bool = False) -> SafeString:
    """Engine output with START/STOP around matches, as escaped HTML with <mark>s. From
    Markdown (a turn's text), bold markers go and `code` shows as code."""
    text = re.sub(r"\s+", " ", text).strip()
    if markdown:
        text = EMPHASIS.sub("", text)
    html = MARKED.sub(r"<mark>\1</mark>", escape(text))
    if markdown:
        # A snippet can cut a code span in two: the half left has no pair, and goes.
        html = CODE.sub(r"<code>\1</code>", html).replace("`", "")
    # A stray mark (the text held one) goes; only our own pairs became tags.
    return mark_safe(html.replace(START, "").replace(STOP, ""))  # noqa: S308 (escaped above)


# Reading the query -----------------------------------------------------------------------

TOKEN = re.compile(r'(-?)"([^"]*)"?|(\S+)')
WORD = re.compile(r"\w")


def _terms(query: str) -> tuple[list[list[str]], list[str]]:
    """The query as alternatives (each a list of quoted terms, all required) and
    excluded terms, in FTS5 string syntax."""
    alternatives: list[list[str]] = [[]]
    excluded: list[str] = []
    for minus, phrase, bare in TOKEN.findall(query):
        text = phrase if phrase or not bare else bare
        if not phrase and text.lower() == "or":
            if alternatives[-1]:
                alternatives.append([])
            continue
        if not phrase and text.startswith("-"):
            minus, text = "-", text[1:]
        if not WORD.search(text):
            continue
        quoted = '"' + text.replace('"', "") + '"'
        (excluded if minus else alternatives[-1]).append(quoted)
    return [terms for terms in alternatives if terms], excluded


def fts5_query(query: str) -> str:
    """The reader's words as an FTS5 query: every word quoted, never raw syntax.
    Empty when there is nothing to look for."""
    alternatives, excluded = _terms(query)
    if not alternatives:
        return ""
    match = " OR ".join(f"({' AND '.join(terms)})" for terms in alternatives)
    if excluded:
        match = f"({match})" + "".join(f" NOT {term}" for term in excluded)
    return match


# The engines ------------------------------------------------------------------------------


def _ids_sql(sessions: QuerySet[Session]) -> tuple[str, tuple]:
    return sessions.order_by().values("pk").query.sql_with_params()


def _tables() -> tuple[str, str]:
    return Turn._meta.db_table, Session._meta.db_table


def _fts5_triggers(table: str, columns: list[str]) -> dict[str, str]:
    """The triggers that keep an external-content FTS5 table in step with its table.
    (Every name in this SQL is one of our own tables or columns.)"""
    fts, names = f"{table}_fts", ", ".join(columns)
    new = ", ".join(f"new.{column}" for column in columns)
    old = ", ".join(f"old.{column}" for column in columns)
    insert = f"INSERT INTO {fts}(rowid, {names}) VALUES (new.id, {new});"  # noqa: S608
    delete = f"INSERT INTO {fts}({fts}, rowid, {names}) VALUES ('delete', old.id, {old});"  # noqa: S608
    return {
        f"{fts}_insert": f"AFTER INSERT ON {table} BEGIN {insert} END",
        f"{fts}_delete": f"AFTER DELETE ON {table} BEGIN {delete} END",
        f"{fts}_update": f"AFTER UPDATE OF {names} ON {table} BEGIN {delete} {insert} END",
    }


class SQLiteSearch:
    # Words are stemmed (overflows finds overflow), as PostgreSQL's english does.
    TOKENIZE = "porter unicode61 remove_diacritics 2"

    @classmethod
    def install(cls, db: BaseDatabaseWrapper) -> None:
        turns, sessions = _tables()
        with db.cursor() as cursor:
            for table, columns in ((turns, ["content"]), (sessions, ["title", "summary"])):
                fts = f"{table}_fts"
                cursor.execute(
                    f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts} USING fts5({', '.join(columns)}, "
                    f"content='{table}', content_rowid='id', tokenize='{cls.TOKENIZE}')"
                )
                cursor.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s",
                    [table],
                )
                present = {name for (name,) in cursor.fetchall()}
                triggers = _fts5_triggers(table, columns)
                missing = [name for name in triggers if name not in present]
                for name in missing:
                    cursor.execute(f"CREATE TRIGGER {name} {triggers[name]}")
                if missing:
                    # Rows written while the triggers were missing (or before the index
                    # existed) are indexed now.
                    cursor.execute(f"INSERT INTO {fts}({fts}) VALUES ('rebuild')")  # noqa: S608

    @staticmethod
    def uninstall(db: BaseDatabaseWrapper) -> None:
        with db.cursor() as cursor:
            for table in _tables():
                cursor.execute(f"DROP TABLE IF EXISTS {table}_fts")

    @staticmethod
    def rank(sessions: QuerySet[Session], query: str) -> list[int]:
        match = fts5_query(query)
        if not match:
            return []
        turns, table = _tables()
        ids, params = _ids_sql(sessions)
        # Sessions whose title matches come first (bm25 cannot compare a title with
        # turns: their tables have different statistics), then by the best turn. FTS5's
        # rank (bm25) is lower for better matches, and cannot be aggregated in the query
        # that matches: each match is materialised first. (An FTS5 table is named
        # in full in MATCH and its functions: an alias does not work there.)
        sql = f"""
            WITH in_turns AS MATERIALIZED (
                SELECT t.session_id AS sid, {turns}_fts.rank AS score
                FROM {turns}_fts JOIN {turns} t ON t.id = {turns}_fts.rowid
                WHERE {turns}_fts MATCH %s AND t.session_id IN ({ids}) AND NOT t.hidden
            ), in_titles AS MATERIALIZED (
                SELECT rowid AS sid, bm25({table}_fts, 4.0, 1.0) AS score
                FROM {table}_fts WHERE {table}_fts MATCH %s AND rowid IN ({ids})
            )
            SELECT sid FROM (
                SELECT sid, 0 AS in_title, MIN(score) AS score FROM in_turns GROUP BY sid
                UNION ALL
                SELECT sid, 1, score FROM in_titles
            ) GROUP BY sid ORDER BY MAX(in_title) DESC, SUM(score), sid LIMIT %s
        """  # noqa: S608 (table names from our models; the values are parameters)
        with connection.cursor() as cursor:
            cursor.execute(sql, [match, *params, match, *params, MAX_SESSIONS])
            return [sid for (sid,) in cursor.fetchall()]

    @staticmethod
    def turns(session_ids: list[int], query: str) -> list[tuple[int, int, str, int, str]]:
        """(session id, number, role, matches in that session, snippet) of the best
        matching turns of each session."""
        turns, _ = _tables()
        marks = ", ".join(["%s"] * len(session_ids))
        sql = f"""
            WITH best AS MATERIALIZED (
                SELECT t.id AS id, t.session_id AS sid, t.number AS number, t.role AS role,
                       ROW_NUMBER() OVER (
                           PARTITION BY t.session_id ORDER BY {turns}_fts.rank
                       ) AS place,
                       COUNT(*) OVER (PARTITION BY t.session_id) AS total
                FROM {turns}_fts JOIN {turns} t ON t.id = {turns}_fts.rowid
                WHERE {turns}_fts MATCH %s AND t.session_id IN ({marks}) AND NOT t.hidden
            )
            SELECT sid, number, role, total, snippet({turns}_fts, 0, %s, %s, '…', 16)
            FROM {turns}_fts JOIN best ON best.id = {turns}_fts.rowid
            WHERE {turns}_fts MATCH %s AND best.place <= %s
            ORDER BY sid, best.place
        """  # noqa: S608
        match = fts5_query(query)
        with connection.cursor() as cursor:
            cursor.execute(sql, [match, *session_ids, START, STOP, match, TURNS_PER_SESSION])
            return cursor.fetchall()

    @staticmethod
    def titles(session_ids: list[int], query: str) -> dict[int, str]:
        _, table = _tables()
        marks = ", ".join(["%s"] * len(session_ids))
        sql = f"""
            SELECT rowid, highlight({table}_fts, 0, %s, %s) FROM {table}_fts
            WHERE {table}_fts MATCH %s AND rowid IN ({marks})
        """  # noqa: S608
        with connection.cursor() as cursor:
            cursor.execute(sql, [START, STOP, fts5_query(query), *session_ids])
            return dict(cursor.fetchall())


def _turn_vector(alias: str) -> str:
    return f"to_tsvector('english', left({alias}content, {PG_TEXT_LIMIT}))"


def _title_vector(alias: str) -> str:
    return (
        f"setweight(to_tsvector('english', {alias}title), 'A') || "
        f"setweight(to_tsvector('english', {alias}summary), 'B')"
    )


class PostgreSQLSearch:
    # Queries use the indexes' very expressions (_turn_vector, _title_vector), or the
    # planner would not use the indexes.
    HEADLINE = (
        f"StartSel={START}, StopSel={STOP}, MaxWords=28, MinWords=10, MaxFragments=2, "
        'FragmentDelimiter=" … "'
    )

    @staticmethod
    def install(db: BaseDatabaseWrapper) -> None:
        turns, sessions = _tables()
        with db.cursor() as cursor:
            for table, expression in ((turns, _turn_vector("")), (sessions, _title_vector(""))):
                cursor.execute(
                    f"CREATE INDEX IF NOT EXISTS {table}_search ON {table} "
                    f"USING gin (({expression}))"
                )

    @staticmethod
    def uninstall(db: BaseDatabaseWrapper) -> None:
        with db.cursor() as cursor:
            for table in _tables():
                cursor.execute(f"DROP INDEX IF EXISTS {table}_search")

    @staticmethod
    def rank(sessions: QuerySet[Session], query: str) -> list[int]:
        if not _terms(query)[0]:
            return []
        turns, table = _tables()
        turn, title = _turn_vector("t."), _title_vector("s.")
        ids, params = _ids_sql(sessions)
        sql = f"""
            WITH q AS (SELECT websearch_to_tsquery('english', %s) AS query)
            SELECT sid FROM (
                SELECT t.session_id AS sid, 0 AS in_title, MAX(ts_rank({turn}, q.query)) AS score
                FROM {turns} t, q
                WHERE {turn} @@ q.query AND t.session_id IN ({ids}) AND NOT t.hidden
                GROUP BY t.session_id
                UNION ALL
                SELECT s.id, 1, ts_rank({title}, q.query)
                FROM {table} s, q
                WHERE {title} @@ q.query AND s.id IN ({ids})
            ) AS found GROUP BY sid ORDER BY MAX(in_title) DESC, SUM(score) DESC, sid LIMIT %s
        """  # noqa: S608
        with connection.cursor() as cursor:
            cursor.execute(sql, [query, *params, *params, MAX_SESSIONS])
            return [sid for (sid,) in cursor.fetchall()]

    @classmethod
    def turns(cls, session_ids: list[int], query: str) -> list[tuple[int, int, str, int, str]]:
        turns, _ = _tables()
        turn = _turn_vector("t.")
        marks = ", ".join(["%s"] * len(session_ids))
        sql = f"""
            WITH q AS (SELECT websearch_to_tsquery('english', %s) AS query)
            SELECT sid, number, role, total,
                   ts_headline('english', left(content, {PG_TEXT_LIMIT}), q.query, %s)
            FROM q, (
                SELECT t.session_id AS sid, t.number, t.role, t.content,
                       ROW_NUMBER() OVER (
                           PARTITION BY t.session_id ORDER BY ts_rank({turn}, q.query) DESC
                       ) AS place,
                       COUNT(*) OVER (PARTITION BY t.session_id) AS total
                FROM {turns} t, q
                WHERE {turn} @@ q.query AND t.session_id IN ({marks}) AND NOT t.hidden
            ) AS best
            WHERE place <= %s ORDER BY sid, place
        """  # noqa: S608
        with connection.cursor() as cursor:
            cursor.execute(sql, [query, cls.HEADLINE, *session_ids, TURNS_PER_SESSION])
            return cursor.fetchall()

    @staticmethod
    def titles(session_ids: list[int], query: str) -> dict[int, str]:
        _, table = _tables()
        marks = ", ".join(["%s"] * len(session_ids))
        sql = f"""
            WITH q AS (SELECT websearch_to_tsquery('english', %s) AS query)
            SELECT s.id, ts_headline('english', s.title, q.query, %s)
            FROM {table} s, q
            WHERE {_title_vector("s.")} @@ q.query AND s.id IN ({marks})
        """  # noqa: S608
        options = f"StartSel={START}, StopSel={STOP}, HighlightAll=true"
        with connection.cursor() as cursor:
            cursor.execute(sql, [query, options, *session_ids])
            return dict(cursor.fetchall())


ENGINES = {"sqlite": SQLiteSearch, "postgresql": PostgreSQLSearch}


def _engine(db: BaseDatabaseWrapper = connection) -> type[SQLiteSearch] | type[PostgreSQLSearch]:
    try:
        return ENGINES[db.vendor]
    except KeyError:
        raise NotImplementedError(f"No full-text search for {db.vendor} databases.") from None


def install(db: BaseDatabaseWrapper) -> None:
    """Create what search needs in this database, or restore what a migration dropped."""
    _engine(db).install(db)


def uninstall(db: BaseDatabaseWrapper) -> None:
    _engine(db).uninstall(db)


def ranked_session_ids(sessions: QuerySet[Session], query: str) -> list[int]:
    """The ids of the sessions among these that match, best first: those whose title or
    summary matches, then the others, each by their best matching turn."""
    return _engine().rank(sessions, query)


def hits(sessions: list[Session], query: str) -> list[SessionHit]:
    """Each session (one of those ranked_session_ids found) with its title highlighted
    and its best matching turns as snippets, in the order given."""
    if not sessions:
        return []
    engine = _engine()
    ids = [session.pk for session in sessions]
    titles = engine.titles(ids, query)
    found = {
        session.pk: SessionHit(session, highlighted(titles.get(session.pk, session.title)))
        for session in sessions
    }
    for sid, number, role, total, snippet in engine.turns(ids, query):
        hit = found[sid]
        url = f"{hit.session.get_absolute_url()}?turn={number}#turn-{number}"
        hit.matches.append(TurnHit(number, role, highlighted(snippet, markdown=True), url))
        hit.more = total - len(hit.matches)
    return list(found.values())
