"""Full-text search over sessions' titles and turns: one interface, an engine per database.

SQLite (the embedded default) searches FTS5 tables that triggers keep in step with the
turn and session tables, so rows written by bulk_create (the importer's writer sends no
signals) are indexed like any other. PostgreSQL searches expression GIN indexes with
websearch_to_tsquery, ranks with ts_rank and cuts snippets with ts_headline: an index on
an expression is always in step. `install` sets either up; a migration and every
`migrate` call it, because SQLite drops a table's triggers whenever a migration rebuilds
that table (Django rebuilds it to add a column with a default).

A session is what a reader looks for, so the session is the document: it matches when
each of the reader's words is somewhere in it (its title, its summary or any turn), and
the turns shown under it are those that hold any of the words, best first. Both engines
read the words the same way (websearch_to_tsquery's syntax): "quoted words" as a phrase,
`or` between alternatives, -word excludes a session that holds it. Raw FTS5 syntax is
never passed through: every term is quoted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html import escape
from typing import Any
from urllib.parse import urlencode

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet
from django.utils.safestring import SafeString, mark_safe

from sessions.models import Session, Turn

# (term's index, session id, 1 if found in the title or summary, score: higher is better)
Row = tuple[int, int, int, float]

# Marks around matched words in snippets, replaced by <mark> once the text is escaped.
START, STOP = "\x02", "\x03"
# What < and > stand in for while PostgreSQL marks the matches.
ANGLES = "\x04\x05"
MARKED = re.compile(f"{START}(.*?){STOP}", re.S)
# What a query never needs: a NUL ends SQLite's string literal early ("unterminated
# string") and PostgreSQL refuses one in text.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
QUERY_LENGTH = 200
# Markdown's marks, dropped from snippets so they read as text: a line's heading, quote,
# or list mark, a code fence, a link's target, and the *, _ and ~ at either edge of a
# word (inside one, as in snake_case, they stay).
LINE_MARK = re.compile(r"^[ \t]*(?:#{1,6}|>|[-+*]|\d{1,9}[.)])[ \t]+", re.M)
FENCE = re.compile(r"(?:```|~~~)[\w+-]*")
LINK = re.compile(r"\[([^\[\]\n]*)\]\([^()\s]*\)")
EMPHASIS = re.compile(r"(?<!\w)[*_~]+|[*_~]+(?!\w)")
CODE = re.compile(r"`([^`]+)`")
SPACE = re.compile(r"\s+")
# About how many characters of a turn its snippet shows.
SNIPPET_CHARS = 200
# The most sessions a search ranks, terms it reads, matching turns shown under each
# session in the list and on a session's own search.
MAX_SESSIONS = 500
MAX_TERMS = 16
TURNS_PER_SESSION = 3
TURNS_IN_SESSION = 100
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
    # Matching turns beyond the ones shown, and where all of them are listed.
    more: int = 0
    more_url: str = ""


def clean_query(raw: str) -> str:
    """The reader's words as the search reads them: no control characters, capped."""
    return CONTROL.sub(" ", raw).strip()[:QUERY_LENGTH]


def _marked(text: str) -> str:
    return MARKED.sub(r"<mark>\1</mark>", escape(SPACE.sub(" ", text)))


def highlighted(text: str, markdown: bool = False) -> SafeString:
    """Engine output with START/STOP around matches, as escaped HTML with <mark>s. From
    Markdown (a turn's text), the marks go, so it reads as plain text, and `code` shows
    as code."""
    if not markdown:
        html = _marked(text)
    else:
        pieces = CODE.split(FENCE.sub(" ", LINE_MARK.sub("", text)))
        # Between code spans, text; a snippet can cut a span in two: the half left has
        # no pair, and its backtick goes.
        html = "".join(
            f"<code>{_marked(piece)}</code>"
            if index % 2
            else _marked(EMPHASIS.sub("", LINK.sub(r"\1", piece))).replace("`", "")
            for index, piece in enumerate(pieces)
        )
    # A stray mark (the text held one) goes; only our own pairs became tags.
    html = SPACE.sub(" ", html).strip()
    return mark_safe(html.replace(START, "").replace(STOP, ""))  # noqa: S308 (escaped above)


def snippet(marked: str) -> SafeString:
    """A window of a turn's Markdown, with every match marked, around its first match,
    as plain text with the matches highlighted."""
    text = FENCE.sub(" ", marked)
    first = max(text.find(START), 0)
    start = max(0, first - SNIPPET_CHARS // 3)
    end = min(len(text), start + SNIPPET_CHARS)
    # Cut between words (the search within a few characters of each edge).
    if start > 0 and (space := text.find(" ", start, min(first, start + 20))) != -1:
        start = space + 1
    if end < len(text) and (space := text.rfind(" ", max(first, end - 20), end)) != -1:
        end = space
    window = text[start:end]
    # A code span open where the window starts is opened again, so that text and code
    # keep their places.
    if text.count("`", 0, start) % 2:
        window = "`" + window
    shown = highlighted(window, markdown=True)
    return mark_safe(("…" if start else "") + shown + ("…" if end < len(text) else ""))  # noqa: S308


# Reading the query -----------------------------------------------------------------------

TOKEN = re.compile(r'(-?)"([^"]*)"?|(\S+)')
WORD = re.compile(r"\w")


@dataclass
class Query:
    """The reader's words: alternatives (each a list of terms a session must all hold)
    and excluded terms. A term is a word or a phrase in double quotes, which both FTS5
    and websearch_to_tsquery read as that word or phrase and nothing else."""

    alternatives: list[list[str]]
    excluded: list[str]

    @property
    def terms(self) -> list[str]:
        """Every term, each once: the wanted ones first."""
        wanted = [term for terms in self.alternatives for term in terms]
        return list(dict.fromkeys(wanted + self.excluded))

    @property
    def wanted(self) -> list[str]:
        return list(dict.fromkeys(term for terms in self.alternatives for term in terms))

    def without(self, dropped: set[str]) -> Query:
        """The query less these terms (PostgreSQL's stop words, which match nothing)."""
        alternatives = [
            [term for term in terms if term not in dropped] for terms in self.alternatives
        ]
        return Query(
            [terms for terms in alternatives if terms],
            [term for term in self.excluded if term not in dropped],
        )


def parse(query: str) -> Query:
    alternatives: list[list[str]] = [[]]
    excluded: list[str] = []
    count = 0
    for minus, phrase, bare in TOKEN.findall(clean_query(query)):
        text = phrase if phrase or not bare else bare
        if not phrase and text.lower() == "or":
            if alternatives[-1]:
                alternatives.append([])
            continue
        if not phrase and text.startswith("-"):
            minus, text = "-", text[1:]
        if not WORD.search(text) or count == MAX_TERMS:
            continue
        count += 1
        quoted = '"' + text.replace('"', "") + '"'
        (excluded if minus else alternatives[-1]).append(quoted)
    return Query([terms for terms in alternatives if terms], excluded)


# The engines ------------------------------------------------------------------------------


def _ids_sql(sessions: QuerySet[Session]) -> tuple[str, tuple[Any, ...]]:
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
    def usable(terms: list[str]) -> list[str]:
        return terms

    @staticmethod
    def term_sessions(sessions: QuerySet[Session], terms: list[str]) -> list[Row]:
        """(term's index, session id, 1 if in the title or summary else 0, score: higher
        is better) for every session among these that holds each term."""
        turns, table = _tables()
        ids, params = _ids_sql(sessions)
        # FTS5's rank (bm25, lower for better matches) cannot be aggregated in the query
        # that matches: each term's matches are materialised first. (An FTS5 table is
        # named in full in MATCH and its functions: an alias does not work there.)
        ctes, selects, values = [], [], []
        for index, term in enumerate(terms):
            ctes.append(f"""
                m{index} AS MATERIALIZED (
                    SELECT t.session_id AS sid, {turns}_fts.rank AS score
                    FROM {turns}_fts JOIN {turns} t ON t.id = {turns}_fts.rowid
                    WHERE {turns}_fts MATCH %s AND t.session_id IN ({ids}) AND NOT t.hidden
                ), n{index} AS MATERIALIZED (
                    SELECT rowid AS sid, bm25({table}_fts, 4.0, 1.0) AS score
                    FROM {table}_fts WHERE {table}_fts MATCH %s AND rowid IN ({ids})
                )""")  # noqa: S608 (table names from our models, indexes ours)
            selects.append(
                f"SELECT {index}, sid, 0, -MIN(score) FROM m{index} GROUP BY sid "  # noqa: S608
                f"UNION ALL SELECT {index}, sid, 1, -score FROM n{index}"
            )
            values += [term, *params, term, *params]
        sql = f"WITH {','.join(ctes)} {' UNION ALL '.join(selects)}"
        with connection.cursor() as cursor:
            cursor.execute(sql, values)
            rows: list[tuple[int, int, int, float]] = cursor.fetchall()
            return rows

    @staticmethod
    def turns(
        session_ids: list[int], query: Query, limit: int
    ) -> list[tuple[int, int, str, int, str]]:
        """(session id, number, role, matches in that session, snippet) of the turns of
        each session that hold any of the words, best first, at most `limit` each."""
        turns, _ = _tables()
        marks = ", ".join(["%s"] * len(session_ids))
        sql = f"""
            WITH best AS MATERIALIZED (
                SELECT t.id AS id, t.session_id AS sid, t.number AS number, t.role AS role,
                       ROW_NUMBER() OVER (
                           PARTITION BY t.session_id ORDER BY {turns}_fts.rank, t.number
                       ) AS place,
                       COUNT(*) OVER (PARTITION BY t.session_id) AS total
                FROM {turns}_fts JOIN {turns} t ON t.id = {turns}_fts.rowid
                WHERE {turns}_fts MATCH %s AND t.session_id IN ({marks}) AND NOT t.hidden
            )
            SELECT sid, number, role, total, highlight({turns}_fts, 0, %s, %s)
            FROM {turns}_fts JOIN best ON best.id = {turns}_fts.rowid
            WHERE {turns}_fts MATCH %s AND best.place <= %s
            ORDER BY sid, best.place
        """  # noqa: S608
        match = " OR ".join(query.wanted)
        with connection.cursor() as cursor:
            cursor.execute(sql, [match, *session_ids, START, STOP, match, limit])
            rows: list[tuple[int, int, str, int, str]] = cursor.fetchall()
            return rows

    @staticmethod
    def titles(session_ids: list[int], query: Query) -> dict[int, str]:
        _, table = _tables()
        marks = ", ".join(["%s"] * len(session_ids))
        sql = f"""
            SELECT rowid, highlight({table}_fts, 0, %s, %s) FROM {table}_fts
            WHERE {table}_fts MATCH %s AND rowid IN ({marks})
        """  # noqa: S608
        with connection.cursor() as cursor:
            cursor.execute(sql, [START, STOP, " OR ".join(query.wanted), *session_ids])
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
    # The whole text with every match marked; the snippet is cut from it in Python, as
    # on SQLite. Its < and > go in as other characters and come back after, or
    # ts_headline would drop what looks like a tag (vec3<u32>).
    HEADLINE = f"StartSel={START}, StopSel={STOP}, HighlightAll=true"

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
    def usable(terms: list[str]) -> list[str]:
        """The terms that stand for something: a stop word alone ("the") makes an empty
        tsquery, which matches nothing."""
        sql = (
            "SELECT term FROM unnest(%s::text[]) AS term "
            "WHERE numnode(websearch_to_tsquery('english', term)) > 0"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [terms])
            kept = {term for (term,) in cursor.fetchall()}
        return [term for term in terms if term in kept]

    @staticmethod
    def term_sessions(sessions: QuerySet[Session], terms: list[str]) -> list[Row]:
        turns, table = _tables()
        turn, title = _turn_vector("t."), _title_vector("s.")
        ids, params = _ids_sql(sessions)
        sql = f"""
            WITH q AS (
                SELECT i - 1 AS i, websearch_to_tsquery('english', term) AS query
                FROM unnest(%s::text[]) WITH ORDINALITY AS terms(term, i)
            )
            SELECT q.i, t.session_id, 0, MAX(ts_rank({turn}, q.query))
            FROM {turns} t JOIN q ON {turn} @@ q.query
            WHERE t.session_id IN ({ids}) AND NOT t.hidden
            GROUP BY q.i, t.session_id
            UNION ALL
            SELECT q.i, s.id, 1, ts_rank({title}, q.query)
            FROM {table} s JOIN q ON {title} @@ q.query
            WHERE s.id IN ({ids})
        """  # noqa: S608
        with connection.cursor() as cursor:
            cursor.execute(sql, [terms, *params, *params])
            rows: list[tuple[int, int, int, float]] = cursor.fetchall()
            return rows

    @classmethod
    def turns(
        cls, session_ids: list[int], query: Query, limit: int
    ) -> list[tuple[int, int, str, int, str]]:
        turns, _ = _tables()
        turn = _turn_vector("t.")
        marks = ", ".join(["%s"] * len(session_ids))
        sql = f"""
            WITH q AS (SELECT websearch_to_tsquery('english', %s) AS query)
            SELECT sid, number, role, total,
                   translate(
                       ts_headline(
                           'english',
                           translate(left(content, {PG_TEXT_LIMIT}), '<>', %s),
                           q.query,
                           %s
                       ),
                       %s,
                       '<>'
                   )
            FROM q, (
                SELECT t.session_id AS sid, t.number, t.role, t.content,
                       ROW_NUMBER() OVER (
                           PARTITION BY t.session_id
                           ORDER BY ts_rank({turn}, q.query) DESC, t.number
                       ) AS place,
                       COUNT(*) OVER (PARTITION BY t.session_id) AS total
                FROM {turns} t, q
                WHERE {turn} @@ q.query AND t.session_id IN ({marks}) AND NOT t.hidden
            ) AS best
            WHERE place <= %s ORDER BY sid, place
        """  # noqa: S608
        match = " or ".join(query.wanted)
        with connection.cursor() as cursor:
            cursor.execute(sql, [match, ANGLES, cls.HEADLINE, ANGLES, *session_ids, limit])
            rows: list[tuple[int, int, str, int, str]] = cursor.fetchall()
            return rows

    @staticmethod
    def titles(session_ids: list[int], query: Query) -> dict[int, str]:
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
            cursor.execute(sql, [" or ".join(query.wanted), options, *session_ids])
            return dict(cursor.fetchall())


ENGINES: dict[str, type[SQLiteSearch] | type[PostgreSQLSearch]] = {
    "sqlite": SQLiteSearch,
    "postgresql": PostgreSQLSearch,
}


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


def _usable(query: str) -> Query:
    found = parse(query)
    if not found.alternatives:
        return found
    kept = set(_engine().usable(found.terms))
    return found.without({term for term in found.terms if term not in kept})


def ranked_session_ids(sessions: QuerySet[Session], query: str) -> list[int]:
    """The ids of the sessions among these that hold every word of one alternative
    (anywhere: title, summary, any turn) and no excluded word, best first: those with
    more of the words in their title or summary, then by how well their best turn for
    each word matches it."""
    found = _usable(query)
    if not found.alternatives:
        return []
    terms = found.terms
    held: dict[int, dict[int, list[float]]] = {}
    for index, sid, in_title, score in _engine().term_sessions(sessions, terms):
        entry = held.setdefault(sid, {}).setdefault(index, [0, 0.0])
        entry[0] = max(entry[0], in_title)
        entry[1] += score
    excluded = {terms.index(term) for term in found.excluded}
    wanted = [[terms.index(term) for term in alternative] for alternative in found.alternatives]
    ranked = []
    for sid, words in held.items():
        if excluded & words.keys():
            continue
        keys = [
            (sum(words[i][0] for i in alternative), sum(words[i][1] for i in alternative))
            for alternative in wanted
            if all(i in words for i in alternative)
        ]
        if keys:
            title_words, score = max(keys)
            ranked.append((-title_words, -score, sid))
    ranked.sort()
    return [sid for *_, sid in ranked[:MAX_SESSIONS]]


def _turn_hits(
    sessions: list[Session], query: Query, limit: int
) -> dict[int, tuple[list[TurnHit], int]]:
    """Each session's turns that hold any of the words, best first, and how many do."""
    found: dict[int, tuple[list[TurnHit], int]] = {}
    links = {session.pk: session.get_absolute_url() for session in sessions}
    for sid, number, role, total, text in _engine().turns(list(links), query, limit):
        url = f"{links[sid]}?turn={number}#turn-{number}"
        hit = TurnHit(number, role, snippet(text), url)
        found.setdefault(sid, ([], total))[0].append(hit)
    return found


def hits(sessions: list[Session], query: str) -> list[SessionHit]:
    """Each session (one of those ranked_session_ids found) with its title highlighted
    and its best matching turns as snippets, in the order given."""
    found = _usable(query)
    if not sessions or not found.alternatives:
        return []
    titles = _engine().titles([session.pk for session in sessions], found)
    turns = _turn_hits(sessions, found, TURNS_PER_SESSION)
    results = []
    for session in sessions:
        hit = SessionHit(session, highlighted(titles.get(session.pk, session.title)))
        hit.matches, total = turns.get(session.pk, ([], 0))
        hit.more = total - len(hit.matches)
        hit.more_url = f"{session.get_absolute_url()}search/?{urlencode({'q': query})}"
        results.append(hit)
    return results


def in_session(session: Session, query: str) -> tuple[list[TurnHit], int]:
    """The turns of one session that hold any of the words, best first (at most
    TURNS_IN_SESSION), and how many do."""
    found = _usable(query)
    if not found.alternatives:
        return [], 0
    return _turn_hits([session], found, TURNS_IN_SESSION).get(session.pk, ([], 0))
