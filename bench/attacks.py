"""Hostile input against a production-like server, with /healthz probed all the while.

    .venv/bin/python bench/attacks.py [--web-workers N] [--root DIR] [--budget S] [--log FILE]

Starts gunicorn as the README runs it (2 processes x 4 threads) on a loopback port, with
KERNELBIN_PRODUCTION=True behind a TLS proxy that this script plays (it sets
X-Forwarded-Proto and X-Forwarded-For; TRUSTED_PROXY_HOPS=1), a scratch SQLite database,
the local replay pool and no API key (the offline tutor). Then, one after another:

  redos-tutor    the attribute-run kernel family (a nested block comment holding a run of
                 attributes that no `fn` follows) submitted to the offline tutor
  redos-import   the same family in fenced wgsl blocks of a Claude Code transcript that
                 staff upload at /import/
  naga-crash     three kernels of nested parentheses that crash the shader compiler, each
                 replay page visited as a reader would (and again after REPLAY_RETRY_AFTER)
  sign-in        30 wrong passwords for alice from one address, then hers from another
  bad-urls       /oembed/?url=http://[::1 and requests with Host headers we do not serve
  tag-oracle     /?tag= for a tag that only a private session has, and for no tag at all

First it sits idle for 5 s, to show how slow /healthz is on the machine anyway. All the
while a probe (a process of its own) GETs /healthz every 50 ms, and the web and replay
worker processes under gunicorn are counted every 100 ms. Per attack it prints the
probes, those slower than 200 ms, the slowest, the replay and web workers that died, and
the statuses seen. It stops by itself: each request has a timeout, the run a budget.

--root runs the same attacks against another checkout (a worktree of an older commit), so
the figures before and after a change come from one script.
"""

from __future__ import annotations

import argparse
import bisect
import http.client
import json
import multiprocessing
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path

HERE = Path(__file__).resolve()
HOST = "kernelbin.test"
ORIGIN = f"https://{HOST}"
STALL_S = 0.2
PROBE_EVERY_S = 0.05
REQUEST_TIMEOUT_S = 40.0
CSRF = secrets.token_hex(16)  # a CSRF secret we choose, sent as cookie and header alike
PASSWORD = "correct horse battery staple"  # noqa: S105 (a scratch account)

VECTOR_ADD = """@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < 1000u) { out[id.x] = a[id.x] + b[id.x]; }
}
"""


def attribute_run(count: int) -> str:
    """A run of attributes no `fn` follows, inside a nested block comment: the kernel
    compiles, and a comment stripper that stops at the first */ sees the run as code.
    Two spaces after each attribute give a backtracking regex three ways to split each."""
    return "/* /* */ " + "@a  " * count + "*/"


def naga_crash(depth: int) -> str:
    """Nested parentheses deep enough to overflow naga's stack (SIGSEGV when compiling)."""
    return (
        "@group(0) @binding(0) var<storage, read_write> out: array<f32>;\n"
        "@compute @workgroup_size(1)\n"
        f"fn main() {{ out[0] = {'(' * depth}1.0{')' * depth}; }}\n"
    )


# -- the scratch database, prepared with the checked-out code's own models -------------------


def prepare() -> None:
    """Run as `attacks.py --prepare` from the root under test; prints what the attacks need."""
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    from kernels.models import Kernel, KernelVersion
    from sessions.models import Session, Tag, Turn

    call_command("migrate", verbosity=0)
    alice = User.objects.create_user("alice", "alice@example.org", PASSWORD)
    curator = User.objects.create_superuser("curator", "curator@example.org", PASSWORD)
    crash = Session.objects.create(slug="crash", title="Crash", visibility="public")
    for number, depth in enumerate((9000, 9500, 10000), start=1):
        turn = Turn.objects.create(session=crash, number=number, role="learner", content="x")
        kernel = Kernel.objects.create(session=crash, name=f"crash-{number}")
        version = KernelVersion.objects.create(
            kernel=kernel, number=1, source=naga_crash(depth), turn=turn
        )
        turn.kernel_version = version
        turn.save()
    hidden = Session.objects.create(slug="hidden", title="Hidden", visibility="private")
    hidden.owner = alice
    hidden.save()
    hidden.tags.add(Tag.objects.create(name="Secret Tag", slug="secret-tag"))
    cookies = {}
    for user in (alice, curator):
        client = Client()
        client.force_login(user)
        cookies[user.username] = client.cookies["sessionid"].value
    print(json.dumps({"cookies": cookies, "crash_turns": [1, 2, 3]}))


# -- talking to the server as a TLS proxy would -------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float


def request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    client: str = "10.0.0.1",
    timeout: float = REQUEST_TIMEOUT_S,
) -> Answer:
    sent = {
        "Host": HOST,
        "X-Forwarded-Proto": "https",
        "X-Forwarded-For": client,
        "Origin": ORIGIN,
        "Referer": f"{ORIGIN}/",
        **(headers or {}),
    }
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        answer = Answer(response.status, dict(response.getheaders()), response.read(), 0.0)
    except (OSError, http.client.HTTPException) as error:
        answer = Answer(0, {"error": type(error).__name__}, b"", 0.0)
    finally:
        connection.close()
    answer.seconds = time.monotonic() - started
    return answer


def cookie_header(session: str = "") -> dict[str, str]:
    cookies = f"csrftoken={CSRF}" + (f"; sessionid={session}" if session else "")
    return {"Cookie": cookies, "X-CSRFToken": CSRF}


def form(fields: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    from urllib.parse import urlencode

    return urlencode(fields).encode(), {"Content-Type": "application/x-www-form-urlencoded"}


def multipart(fields: dict[str, str], name: str, content: bytes) -> tuple[bytes, dict[str, str]]:
    boundary = secrets.token_hex(12)
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode()
        for key, value in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n".encode()
        + content
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return b"".join(parts), {"Content-Type": f"multipart/form-data; boundary={boundary}"}


# -- watching: the probe and the census of worker processes ------------------------------------


def probe(port: int, stop: Event, out: Connection) -> None:
    """GET /healthz every PROBE_EVERY_S until stopped, in a process of its own (so the
    attacks' client work never delays it); sends back (started, seconds, status) each."""
    probes = []
    while not stop.is_set():
        started = time.monotonic()
        answer = request(port, "GET", "/healthz")
        probes.append((started, answer.seconds, answer.status))
        stop.wait(max(0.0, PROBE_EVERY_S - (time.monotonic() - started)))
    out.send(probes)


@dataclass
class Watch:
    """The probe's answers and the workers that died, each placed in the attack of its time."""

    port: int
    master: int
    marks: list[tuple[float, str]] = field(default_factory=lambda: [(0.0, "warm-up")])
    probes: list[tuple[float, float, int]] = field(default_factory=list)
    deaths: list[tuple[float, str]] = field(default_factory=list)  # (when, "replay" | "web")
    stopped: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Watch:
        context = multiprocessing.get_context("fork")  # before any thread of ours starts
        self.stop_probe = context.Event()
        self.answers, sender = context.Pipe(duplex=False)
        self.prober = context.Process(
            target=probe, args=(self.port, self.stop_probe, sender), daemon=True
        )
        self.prober.start()
        threading.Thread(target=self._census, daemon=True).start()
        return self

    def stop(self) -> None:
        self.stop_probe.set()
        self.probes = self.answers.recv()
        self.prober.join(timeout=REQUEST_TIMEOUT_S)
        self.stopped.set()

    def mark(self, name: str) -> None:
        self.marks.append((time.monotonic(), name))

    def phase_at(self, moment: float) -> str:
        return self.marks[bisect.bisect_right([at for at, _ in self.marks], moment) - 1][1]

    def _census(self) -> None:
        seen: dict[int, str] = {}
        while not self.stopped.is_set():
            now = dict(self.workers())
            self.deaths.extend(
                (time.monotonic(), kind) for pid, kind in seen.items() if pid not in now
            )
            seen = now
            self.stopped.wait(0.1)

    def workers(self) -> list[tuple[int, str]]:
        """(pid, "web" | "replay") of gunicorn's workers and their replay workers."""
        parents: dict[int, tuple[int, str]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                    command = Path(f"/proc/{entry}/cmdline").read_bytes()
                except OSError:
                    continue
                parents[int(entry)] = (int(stat.rsplit(")", 1)[1].split()[1]), command.decode())
        web = {pid for pid, (parent, _) in parents.items() if parent == self.master}
        replay = {
            pid
            for pid, (parent, command) in parents.items()
            if parent in web and ("kernels.engine.worker" in command or "kernels.worker" in command)
        }
        return [(pid, "web") for pid in web] + [(pid, "replay") for pid in replay]


@dataclass
class Result:
    attack: str
    statuses: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    kernels: int = 0


@contextmanager
def phase(watch: Watch, result: Result):
    watch.mark(result.attack)
    try:
        yield result
    finally:
        time.sleep(0.5)  # let the census see the processes that died at the end
        watch.mark("between")


# -- the attacks ---------------------------------------------------------------------------------

# Three ways to split each attribute: a backtracking engine takes about 3x longer per one
# more (13 in a fenced block took 9.8 s before the importer read WGSL with a tokenizer).
TUTOR_SIZES = (8, 11, 14)
IMPORT_SIZES = (8, 11, 13)


def idle(watch: Watch, seconds: float = 5.0) -> Result:
    """No attack: how slow /healthz is on this machine anyway (other work on its cores)."""
    result = Result("idle")
    with phase(watch, result):
        time.sleep(seconds)
    return result


def redos_tutor(watch: Watch, alice: str) -> Result:
    result = Result("redos-tutor", kernels=len(TUTOR_SIZES))
    with phase(watch, result):
        body, headers = form({"lesson": "first-compute-shader"})
        started = request(watch.port, "POST", "/tutor/start/", body, headers | cookie_header(alice))
        result.statuses[f"start {started.status}"] += 1
        page = started.headers.get("Location", "")
        if not page.startswith("/tutor/"):
            result.notes.append(f"no guided session: {started.status}")
            return result
        for count in (0, *TUTOR_SIZES):  # the first starts the replay workers
            source = f"{VECTOR_ADD}\n{attribute_run(count) if count else ''}\n"
            body, headers = form({"source": source, "note": ""})
            answer = request(
                watch.port, "POST", f"{page}submit/", body, headers | cookie_header(alice)
            )
            result.statuses[f"submit {answer.status}"] += 1
            what = f"{count} attributes" if count else "the plain kernel"
            result.notes.append(f"{what}: answered in {answer.seconds:.2f} s")
    return result


def transcript(count: int) -> bytes:
    """A Claude Code transcript whose learner pastes the attribute run as a wgsl block."""
    session = f"00000000-0000-4000-8000-{count:012d}"
    lines, parent = [], None
    texts = [
        ("user", f"Why does this not compile?\n\n```wgsl\n@compute  {'@a  ' * count}\n```\n"),
        ("assistant", "There is no function after the attributes."),
    ]
    for index, (kind, text) in enumerate(texts, start=1):
        uuid = f"00000000-0000-4000-9000-{count:06d}{index:06d}"
        message: dict = {"role": kind, "content": text}
        if kind == "assistant":
            message |= {"id": f"msg_{count}", "type": "message", "model": "claude-opus-4-6"}
            message["content"] = [{"type": "text", "text": text}]
        envelope = {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": session}
        envelope |= {"timestamp": f"2026-01-01T00:00:0{index}.000Z", "cwd": "/w"}
        lines.append(envelope | {"version": "2.1.76", "userType": "external", "message": message})
        parent = uuid
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def redos_import(watch: Watch, curator: str) -> Result:
    result = Result("redos-import", kernels=len(IMPORT_SIZES))
    with phase(watch, result):
        for count in IMPORT_SIZES:
            fields = {"title": "", "slug": f"redos-{count}", "visibility": "private"}
            body, headers = multipart(fields, f"redos-{count}.jsonl", transcript(count))
            answer = request(watch.port, "POST", "/import/", body, headers | cookie_header(curator))
            result.statuses[f"import {answer.status}"] += 1
            result.notes.append(f"{count} attributes: answered in {answer.seconds:.2f} s")
    return result


def replay_until_done(port: int, turn: int, give_up_s: float = 60.0) -> dict:
    """Open the replay page, then ask replay.json about its run as the page's script does."""
    page = request(port, "GET", f"/s/crash/turns/{turn}/replay/")
    path = f"/s/crash/turns/{turn}/replay.json"
    answer = request(port, "GET", f"{path}?wait=3")
    end = time.monotonic() + give_up_s
    while answer.status in (202, 503) and time.monotonic() < end:
        run = json.loads(answer.body).get("run", {}).get("id")
        answer = request(port, "GET", f"{path}?wait=3" + (f"&run={run}" if run else ""))
    body = json.loads(answer.body) if answer.status == 200 else {}
    return {"page": page, "status": (body.get("outcome") or {}).get("status", answer.status)}


def shows_internals(page: Answer) -> bool:
    import re

    return bool(re.search(rb"Worker \d+|stderr|Fatal Python error", page.body))


def naga_crashes(watch: Watch, turns: list[int], retry_after_s: int) -> Result:
    result = Result("naga-crash", kernels=len(turns))
    with phase(watch, result):
        pages = []
        for visit in range(3):
            if visit == 2:
                time.sleep(retry_after_s + 1)  # past the time an uncached outcome is shown
            for turn in turns:
                seen = replay_until_done(watch.port, turn)
                result.statuses[f"outcome {seen['status']}"] += 1
                pages.append(request(watch.port, "GET", f"/s/crash/turns/{turn}/replay/"))
        shown = sum(shows_internals(page) for page in pages)
        result.notes.append(f"{len(turns)} kernels x 3 visits; pages showing internals: {shown}")
        result.statuses.update(f"page {page.status}" for page in pages)
    return result


def sign_in(watch: Watch) -> Result:
    result = Result("sign-in")
    with phase(watch, result):
        for _ in range(30):
            body, headers = form({"username": "alice", "password": "guess"})
            answer = request(
                watch.port, "POST", "/accounts/login/", body, headers | cookie_header(), "10.6.6.6"
            )
            result.statuses[f"guess {answer.status}"] += 1
        body, headers = form({"username": "alice", "password": PASSWORD})
        answer = request(
            watch.port, "POST", "/accounts/login/", body, headers | cookie_header(), "10.0.0.7"
        )
        result.statuses[f"alice {answer.status}"] += 1
        result.notes.append(
            "alice signs in from elsewhere" if answer.status == 302 else "alice is locked out"
        )
    return result


def bad_urls(watch: Watch) -> Result:
    result = Result("bad-urls")
    cases = [
        ("oembed [::1", "/oembed/?url=http://[::1", {}),
        ("oembed port", "/oembed/?url=http://kernelbin.test:99999/s/x/", {}),
        ("Host evil", "/", {"Host": "evil.example"}),
        ("Host [::1", "/", {"Host": "[::1"}),
        ("Host 404 evil", "/no-such-page/", {"Host": "evil.example"}),
    ]
    with phase(watch, result):
        for label, path, headers in cases:
            answer = request(watch.port, "GET", path, headers=headers)
            result.statuses[f"{label} {answer.status}"] += 1
    return result


def tag_oracle(watch: Watch) -> Result:
    result = Result("tag-oracle")
    with phase(watch, result):
        for label, slug in (("private tag", "secret-tag"), ("no tag", "no-such-tag")):
            answer = request(watch.port, "GET", f"/?tag={slug}")
            result.statuses[f"{label} {answer.status}"] += 1
            if b"Secret Tag" in answer.body:
                result.notes.append(f"{label}: the private tag's name is on the page")
    return result


# -- the server ----------------------------------------------------------------------------------


def server_env(root: Path, database: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DJANGO")}
    env.pop("ANTHROPIC_API_KEY", None)
    return env | {
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "PYTHONPATH": str(root),
        "KERNELBIN_PRODUCTION": "True",
        "DJANGO_DEBUG": "False",
        "SECRET_KEY": secrets.token_urlsafe(48),
        "ALLOWED_HOSTS": HOST,
        "SITE_URL": ORIGIN,
        "TRUSTED_PROXY_HOPS": "1",
        "SQLITE_PATH": str(database),
        "REPLAY_RETRY_AFTER": "5",
        "LOG_LEVEL": "ERROR",
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def gunicorn(root: Path, env: dict[str, str], log: Path, workers: int):
    """The README's production command on a loopback port; yields (port, master pid)."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "config.wsgi:application",
        f"--workers={workers}",
        "--threads=4",
        f"--bind=127.0.0.1:{port}",
    ]
    with log.open("wb") as output:
        server = subprocess.Popen(
            command, cwd=root, env=env, stdout=output, stderr=output, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 60
        while not request(port, "GET", "/healthz", timeout=2).status:
            if time.monotonic() > deadline or server.poll() is not None:
                tail = log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"gunicorn did not start:\n{tail}")
            time.sleep(0.2)
        yield port, server.pid
    finally:
        # The replay workers die with their parents; the group goes down with gunicorn.
        with suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)


def manage(root: Path, env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [sys.executable, *args], cwd=root, env=env, check=True, capture_output=True, text=True
    ).stdout


# -- the report ----------------------------------------------------------------------------------


def report(watch: Watch, results: list[Result]) -> None:
    print(
        f"{'attack':13} {'probes':>6} {'>200ms':>6} {'slowest':>8} {'replay died':>11} "
        f"{'per kernel':>10} {'web died':>8}  statuses"
    )
    for result in results:
        times = [s for at, s, _ in watch.probes if watch.phase_at(at) == result.attack]
        stalled = sum(seconds > STALL_S for seconds in times)
        died = Counter(kind for at, kind in watch.deaths if watch.phase_at(at) == result.attack)
        per_kernel = f"{died['replay'] / result.kernels:.1f}" if result.kernels else "-"
        statuses = ", ".join(f"{key}: {count}" for key, count in sorted(result.statuses.items()))
        print(
            f"{result.attack:13} {len(times):>6} {stalled:>6} "
            f"{1000 * max(times, default=0):>6.0f}ms {died['replay']:>11} {per_kernel:>10} "
            f"{died['web']:>8}  {statuses}"
        )
        for note in result.notes:
            print(f"{'':15}{note}")
    probe_statuses = Counter(status for _, _, status in watch.probes)
    print(f"/healthz answers: {dict(sorted(probe_statuses.items()))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=HERE.parent.parent)
    parser.add_argument("--budget", type=int, default=600, help="seconds for the whole run")
    parser.add_argument("--log", type=Path, help="keep gunicorn's log in this file")
    parser.add_argument(
        "--web-workers",
        type=int,
        default=2,
        help="gunicorn processes (1 shows what a request that holds its process does to others)",
    )
    parser.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.prepare:
        prepare()
        return
    signal.signal(signal.SIGALRM, lambda *_: sys.exit("the run went over its budget"))
    signal.alarm(args.budget)
    root = args.root.resolve()
    with tempfile.TemporaryDirectory(prefix="kernelbin-attacks-") as scratch:
        env = server_env(root, Path(scratch) / "attacks.sqlite3")
        setup = json.loads(manage(root, env, str(HERE), "--prepare"))
        manage(root, env, "manage.py", "collectstatic", "--noinput", "-v0")
        log = args.log or Path(scratch) / "gunicorn.log"
        with gunicorn(root, env, log, args.web_workers) as (port, master):
            watch = Watch(port, master).start()
            time.sleep(2)
            results = [
                idle(watch),
                redos_tutor(watch, setup["cookies"]["alice"]),
                redos_import(watch, setup["cookies"]["curator"]),
                naga_crashes(watch, setup["crash_turns"], int(env["REPLAY_RETRY_AFTER"])),
                sign_in(watch),
                bad_urls(watch),
                tag_oracle(watch),
            ]
            watch.stop()
        print(
            f"root: {root} ({git_head(root)}), gunicorn {args.web_workers} x 4 threads, "
            "production settings"
        )
        report(watch, results)


def git_head(root: Path) -> str:
    head = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return head.stdout.strip() or "?"


if __name__ == "__main__":
    main()
