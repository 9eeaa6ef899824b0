"""Server time of session pages and embeds, each against the same bytes served as a
static file by the same gunicorn worker in the same run.

    .venv/bin/python bench/session_pages.py [--requests 300]

Sessions of 10, 100 and 1,000 turns are generated into a scratch database. A session
page shows TURNS_PER_PAGE turns (100); the 1,000-turn session is also measured on its
last page. Prints the first, uncached render, then medians and p95 of repeated GETs
(served from the page cache) and the page/static ratio (the aim: under 3x).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import urllib.request
from pathlib import Path

from common import gunicorn, median_ms, p95_ms, setup_django, timed_gets

TUTOR = """Look at how `row` and `col` are computed from `global_invocation_id`:

```wgsl
let row = id.y;
let col = id.x;
var sum = 0.0;
for (var k = 0u; k < params.k; k++) {{
    sum += a[row * params.k + k] * b[k * params.n + col];
}}
out[row * params.n + col] = sum;
```

Which of the two indices walks along a row of `b`? Turn {n}."""
LEARNER = (
    "I think `col` does, because consecutive threads in x read consecutive floats of b. (turn {n})"
)
TOOL = "```console\n$ run_kernel matmul\nmismatch: 1,012 of 4,096 cells wrong\n```"


def make_session(turns: int) -> str:
    from sessions.markdown import render_markdown
    from sessions.models import Session, Turn

    slug = f"bench-{turns}"
    session = Session.objects.create(slug=slug, title=f"Bench {turns}", visibility="public")
    rows = []
    for n in range(1, turns + 1):
        role, text = [("learner", LEARNER), ("tutor", TUTOR), ("tool", TOOL)][n % 3]
        content = text.format(n=n)
        rows.append(
            Turn(
                session=session, number=n, role=role, content=content, html=render_markdown(content)
            )
        )
    Turn.objects.bulk_create(rows)
    return slug


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        database = scratch / "bench.sqlite3"
        setup_django(database)
        targets = []
        for turns in (10, 100, 1000):
            slug = make_session(turns)
            targets.append((f"{turns:>5} turns  page", f"/s/{slug}/"))
            if turns == 1000:
                targets.append((f"{turns:>5} turns  last page", f"/s/{slug}/?page=10"))
            last = min(turns, 10)
            targets.append(
                (f"{turns:>5} turns  embed 1-{last}", f"/s/{slug}/embed/?from=1&to={last}")
            )

        static = scratch / "static"
        static.mkdir()
        env = {"SQLITE_PATH": str(database), "BENCH_STATIC_DIR": str(static)}
        # First pass, on a fresh server: each page rendered from the database (the cache
        # is empty), and its bytes kept to be served again as a static file.
        first = {}
        with gunicorn("bench.session_pages_wsgi:application", env) as base:
            for index, (_, path) in enumerate(targets):
                started = time.perf_counter()
                body = urllib.request.urlopen(base + path).read()  # noqa: S310 (our own server)
                first[index] = 1000 * (time.perf_counter() - started)
                (static / f"{index}.html").write_bytes(body)

        print(
            f"{'what':28} {'bytes':>9} {'1st ms':>7} {'page ms':>8} {'p95':>6} "
            f"{'static ms':>9} {'p95':>6} {'ratio':>6}"
        )
        with gunicorn("bench.session_pages_wsgi:application", env) as base:
            for index, (label, path) in enumerate(targets):
                page, size = timed_gets(base, path, args.requests)
                baseline, _ = timed_gets(base, f"/bench-static/{index}.html", args.requests)
                ratio = median_ms(page) / median_ms(baseline)
                print(
                    f"{label:28} {size:>9,} {first[index]:>7.1f} {median_ms(page):>8.2f} "
                    f"{p95_ms(page):>6.2f} {median_ms(baseline):>9.2f} {p95_ms(baseline):>6.2f} "
                    f"{ratio:>5.1f}x"
                )


if __name__ == "__main__":
    main()
