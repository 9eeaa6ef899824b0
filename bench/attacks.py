"""Hostile input against a production-like server, with /healthz probed all the while.

    .venv/bin/python bench/attacks.py [--only A,B] [--views N] [--web-workers N]
                                      [--root DIR] [--budget S] [--log FILE]

Starts gunicorn as the README runs it (2 processes x 4 threads) on a loopback port, with
KERNELBIN_PRODUCTION=True behind a TLS proxy that this script plays (it sets
X-Forwarded-Proto and X-Forwarded-For; TRUSTED_PROXY_HOPS=1), a scratch SQLite database,
the local replay pool, and a Messages API of our own on loopback (it answers at once,
except while the tutor-trickle attack has it send nothing but pings). Everything stays
on 127.0.0.1. Then, one after another (each is a function marked @attack below, run in
the order written; --only picks some by name):

  idle           no attack, first: how slow /healthz is on this machine anyway
  redos-tutor    the attribute-run kernel family (a nested block comment holding a run of
                 attributes that no `fn` follows) submitted to the tutor
  redos-import   the same family in fenced wgsl blocks of a Claude Code transcript that
                 staff upload at /import/ (its upload's page followed until it is done)
  naga-crash     three kernels of nested parentheses that crash the shader compiler, each
                 replay page visited as a reader would (and again after REPLAY_RETRY_AFTER)
  fork-40-buffers, fork-200x200
                 a reader forks a host program that creates and destroys 40 uniform
                 buffers of 128 MiB (or records 200 passes of 200 dispatches); once its run
                 is done, one view of the fork page is timed alone (its page cost), then 16
                 anonymous views are made at once (--views), on a row of their own
  tutor-trickle  8 learners send a message each while the API sends only a ping every
                 TRICKLE_PING_S for TRICKLE_S, then cuts the stream
  big-import     staff upload a 200,000-line transcript while alice signs in every 2 s
                 until its upload's page says it is done; the front page is timed before
                 and after
  big-reimport   the same upload again, a re-import, while alice signs in and a reader
                 without cookies reads the session's last page every 2 s
  sign-in        30 wrong passwords for alice from one address, then hers from another
  bad-urls       /?q=a%00b, ?turn= of 4,301 digits (gunicorn refuses the line) and of
                 4,000, turn numbers past 64 bits, ?wait=nan,
                 /oembed/?url=http://[::1 and requests with Host headers we do not serve
  tag-oracle     /?tag= for a tag that only a private session has, and for no tag at all
  embed-link     Chromium opens a blog page on another loopback origin that loads
                 embed.js over a `javascript:` link with the embed class and a foreign
                 iframe that asks to be 19,999 px tall
  guardrail      the guardrail's evasion corpus: `python -m tutor.evasions` in the root
                 under test, then each evasion as Claude's reply to a learner's message
  forged-records forks whose programs attack the shim (a replaced JSON.stringify, polluted
                 prototypes, __host.console, forged ids and sizes, values nested 100,000
                 deep, `throw null`): how each run ended, its line, and any Python text
  fork-huge-labels, fork-32mib-error, fork-backtracking-regex, fork-endless-loop
                 hostile forks as above: five buffer labels of 20 MiB, an error message of
                 32 MiB, a regular expression that backtracks, a loop that never ends
  idle-after     no attack, last: whether the site came back

All the while a probe (a process of its own) GETs /healthz every 50 ms, and the web and
replay worker processes under gunicorn are counted every 100 ms. Per attack it prints
the probes, their p95 and slowest beside the idle baseline's, those slower than 200 ms,
the replay and web workers that died, the statuses seen, and notes (page costs). It
stops by itself: each request has a timeout, each loop a bound, the run a budget. After
each attack it waits (at most SETTLE_S) until /healthz answers within 200 ms again, so
that what a request the client gave up on still costs the server is counted in its
attack, not the next.

To add an attack: write a function of a Context that returns a Result, mark it
@attack("name"), and put it where it should run; what it needs in the database comes
from a function marked @preparing, run by `--prepare` with Django set up.

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
import re
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

if TYPE_CHECKING:
    from django.contrib.auth.models import User

HERE = Path(__file__).resolve()
HOST = "kernelbin.test"
ORIGIN = f"https://{HOST}"
STALL_S = 0.2
PROBE_EVERY_S = 0.05
REQUEST_TIMEOUT_S = 40.0
CSRF = secrets.token_hex(16)  # a CSRF secret we choose, sent as cookie and header alike
PASSWORD = "correct horse battery staple"  # noqa: S105 (a scratch account)
LEARNERS = 8

VECTOR_ADD = """@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&out)) { out[id.x] = a[id.x] + b[id.x]; }
}
"""

# The host program a hostile fork starts from: the vector add, written out.
HOST_PROGRAM = (
    """const adapter = await navigator.gpu.requestAdapter();
const device = await adapter.requestDevice();
const n = 1000;
const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST;
const a = device.createBuffer({ label: "a", size: 4 * n, usage });
const b = device.createBuffer({ label: "b", size: 4 * n, usage });
const written = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC;
const out = device.createBuffer({ label: "out", size: 4 * n, usage: written });
device.queue.writeBuffer(a, 0, new Float32Array(n).map((_, i) => i));
device.queue.writeBuffer(b, 0, new Float32Array(n).map((_, i) => 2 * i));
const module = device.createShaderModule({ code: `"""
    + VECTOR_ADD
    + """` });
const compute = { module, entryPoint: "main" };
const pipeline = device.createComputePipeline({ layout: "auto", compute });
const group = device.createBindGroup({
  layout: pipeline.getBindGroupLayout(0),
  entries: [a, b, out].map((buffer, binding) => ({ binding, resource: { buffer } })),
});
"""
)
SUBMIT = """const encoder = device.createCommandEncoder();
const pass = encoder.beginComputePass();
pass.setPipeline(pipeline);
pass.setBindGroup(0, group);
pass.dispatchWorkgroups(16);
pass.end();
device.queue.submit([encoder.finish()]);
"""
FORTY_BUFFERS = """for (let i = 0; i < 40; i++) {
  const usage = GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST;
  const big = device.createBuffer({ label: `uniform ${i}`, size: 128 * 1024 * 1024, usage });
  big.destroy();
}
"""
PASSES_200X200 = """const encoder = device.createCommandEncoder();
for (let p = 0; p < 200; p++) {
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, group);
  for (let d = 0; d < 200; d++) pass.dispatchWorkgroups(1);
  pass.end();
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

PREPARERS: list[Callable[[], dict[str, Any]]] = []


def preparing(function: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """Mark a function that writes what an attack needs and returns what it must know
    (merged into Context.setup); run in order by `--prepare`, Django set up."""
    PREPARERS.append(function)
    return function


def prepare() -> None:
    """Run as `attacks.py --prepare` from the root under test; prints what the attacks need."""
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    setup: dict[str, Any] = {}
    for function in PREPARERS:
        setup |= function()
    print(json.dumps(setup))


def signed_in(user: User) -> str:
    """A session cookie for this user."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


@preparing
def accounts() -> dict[str, Any]:
    from django.contrib.auth.models import User

    alice = User.objects.create_user("alice", "alice@example.org", PASSWORD)
    curator = User.objects.create_superuser("curator", "curator@example.org", PASSWORD)
    learners = [User.objects.create_user(f"learner{n}", password=PASSWORD) for n in range(LEARNERS)]
    return {
        "cookies": {"alice": signed_in(alice), "curator": signed_in(curator)},
        "learners": [signed_in(learner) for learner in learners],
    }


@preparing
def sessions() -> dict[str, Any]:
    from django.contrib.auth.models import User

    from sessions.models import Session, Tag, Turn
    from sessions.programs import Kernel, KernelVersion

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
    hidden.owner = User.objects.get(username="alice")
    hidden.save()
    hidden.tags.add(Tag.objects.create(name="Secret Tag", slug="secret-tag"))
    # The version readers fork: the vector add as a host program.
    host = Session.objects.create(slug="host", title="Host", visibility="public")
    turn = Turn.objects.create(session=host, number=1, role="learner", content="My program.")
    kernel = Kernel.objects.create(session=host, name="add")
    version = KernelVersion.objects.create(
        kernel=kernel, number=1, source=VECTOR_ADD, host_program=HOST_PROGRAM + SUBMIT, turn=turn
    )
    turn.kernel_version = version
    turn.save()
    return {"crash_turns": [1, 2, 3], "fork_from": "/s/host/turns/1/fork/"}


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


def at_once(count: int, call: Callable[[], Answer]) -> list[Answer]:
    """The same request made count times at once (one thread each)."""
    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(lambda _: call(), range(count)))


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
            # A process /proc could not be read from this once is not dead: only one gone.
            gone = {pid: kind for pid, kind in seen.items() if not Path(f"/proc/{pid}").exists()}
            self.deaths.extend((time.monotonic(), kind) for kind in gone.values())
            seen = now | {pid: kind for pid, kind in seen.items() if pid not in now | gone}
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
class Context:
    """What an attack works with: the watch (its port), what --prepare wrote, the
    server's environment, and the fake Messages API."""

    watch: Watch
    setup: dict[str, Any]
    env: dict[str, str]
    api: FakeAPI
    views: int = 16  # of each hostile fork, at once

    @property
    def port(self) -> int:
        return self.watch.port


@dataclass
class Result:
    attack: str
    statuses: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    kernels: int = 0
    # Later parts of the attack, each reported on a row of its own (Watch.mark).
    parts: list[str] = field(default_factory=list)


ATTACKS: list[tuple[str, Callable[[Context], Result]]] = []


def attack(name: str) -> Callable[[Callable[[Context], Result]], Callable[[Context], Result]]:
    """Mark a function as an attack, run in the order the attacks are written."""

    def mark(function: Callable[[Context], Result]) -> Callable[[Context], Result]:
        ATTACKS.append((name, function))
        return function

    return mark


SETTLE_S = 600


def settle(port: int) -> float:
    """Seconds until /healthz answers within STALL_S again (at most SETTLE_S): a request
    the client gave up on may still hold the server."""
    started = time.monotonic()
    while time.monotonic() - started < SETTLE_S:
        if request(port, "GET", "/healthz", timeout=10).seconds < STALL_S:
            break
        time.sleep(1.0)
    return time.monotonic() - started


@contextmanager
def phase(context: Context, name: str, kernels: int = 0) -> Iterator[Result]:
    """The probes taken while the block runs, and until the site answers quickly again,
    count for this attack."""
    result = Result(name, kernels=kernels)
    context.watch.mark(name)
    try:
        yield result
    finally:
        if (waited := settle(context.port)) > 2:
            result.notes.append(f"the site answered quickly again {waited:.0f} s later")
        time.sleep(0.5)  # let the census see the processes that died at the end
        context.watch.mark("between")


# -- the attacks ---------------------------------------------------------------------------------

# Three ways to split each attribute: a backtracking engine takes about 3x longer per one
# more (13 in a fenced block took 9.8 s before the importer read WGSL with a tokenizer).
TUTOR_SIZES = (8, 11, 14)
IMPORT_SIZES = (8, 11, 13)


@attack("idle")
def idle(context: Context) -> Result:
    """No attack: how slow /healthz is on this machine anyway (other work on its cores)."""
    with phase(context, "idle") as result:
        time.sleep(5.0)
    return result


def start_guided(context: Context, cookie: str, result: Result) -> str:
    """A new guided session of this learner; its page's path, or "" (noted)."""
    body, headers = form({"lesson": "first-compute-shader"})
    started = request(context.port, "POST", "/tutor/start/", body, headers | cookie_header(cookie))
    result.statuses[f"start {started.status}"] += 1
    page = started.headers.get("Location", "")
    if not page.startswith("/tutor/"):
        result.notes.append(f"no guided session: {started.status}")
        return ""
    return page


@attack("redos-tutor")
def redos_tutor(context: Context) -> Result:
    alice = context.setup["cookies"]["alice"]
    with phase(context, "redos-tutor", kernels=len(TUTOR_SIZES)) as result:
        page = start_guided(context, alice, result)
        for count in (0, *TUTOR_SIZES) if page else ():  # the first starts the replay workers
            source = f"{VECTOR_ADD}\n{attribute_run(count) if count else ''}\n"
            body, headers = form({"source": source, "note": ""})
            answer = request(
                context.port, "POST", f"{page}submit/", body, headers | cookie_header(alice)
            )
            result.statuses[f"submit {answer.status}"] += 1
            what = f"{count} attributes" if count else "the plain kernel"
            result.notes.append(f"{what}: answered in {answer.seconds:.2f} s")
    return result


def transcript_line(
    number: int, kind: str, text: str, parent: str | None, key: str
) -> dict[str, Any]:
    """One line of a Claude Code transcript: a message of the learner or of the assistant."""
    uuid = f"00000000-0000-4000-9000-{number:012d}"
    message: dict[str, Any] = {"role": kind, "content": text}
    if kind == "assistant":
        message |= {"id": f"msg_{key}_{number}", "type": "message", "model": "claude-opus-4-6"}
        message["content"] = [{"type": "text", "text": text}]
    envelope = {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": key}
    envelope |= {"timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w", "version": "2.1.76"}
    return envelope | {"userType": "external", "message": message}


def transcript(texts: list[tuple[str, str]], key: str) -> bytes:
    lines, parent = [], None
    for number, (kind, text) in enumerate(texts, start=1):
        line = transcript_line(number, kind, text, parent, key)
        lines.append(json.dumps(line) + "\n")
        parent = line["uuid"]
    return "".join(lines).encode()


def redos_transcript(count: int) -> bytes:
    """A transcript whose learner pastes the attribute run as a wgsl block."""
    texts = [
        ("user", f"Why does this not compile?\n\n```wgsl\n@compute  {'@a  ' * count}\n```\n"),
        ("assistant", "There is no function after the attributes."),
    ]
    return transcript(texts, f"00000000-0000-4000-8000-{count:012d}")


@attack("redos-import")
def redos_import(context: Context) -> Result:
    curator = context.setup["cookies"]["curator"]
    with phase(context, "redos-import", kernels=len(IMPORT_SIZES)) as result:
        for count in IMPORT_SIZES:
            fields = {"title": "", "slug": f"redos-{count}", "visibility": "private"}
            body, headers = multipart(fields, f"redos-{count}.jsonl", redos_transcript(count))
            answer = request(
                context.port, "POST", "/import/", body, headers | cookie_header(curator)
            )
            answer = imported(context.port, answer, curator)
            result.statuses[f"import {answer.status}"] += 1
            result.notes.append(f"{count} attributes: answered in {answer.seconds:.2f} s")
    return result


def run_until_done(port: int, page: str, give_up_s: float = 60.0) -> dict[str, Any]:
    """Ask the page's replay.json about its run as the page's script does, until it ends."""
    path = f"{page}replay.json"
    answer = request(port, "GET", f"{path}?wait=3")
    end = time.monotonic() + give_up_s
    while answer.status in (202, 503) and time.monotonic() < end:
        run = json.loads(answer.body).get("run", {}).get("id")
        answer = request(port, "GET", f"{path}?wait=3" + (f"&run={run}" if run else ""))
    body = json.loads(answer.body) if answer.status == 200 else {}
    return {"status": (body.get("outcome") or {}).get("status", answer.status)}


def shows_internals(page: Answer) -> bool:
    return bool(re.search(rb"Worker \d+|stderr|Fatal Python error", page.body))


@attack("naga-crash")
def naga_crashes(context: Context) -> Result:
    turns = context.setup["crash_turns"]
    with phase(context, "naga-crash", kernels=len(turns)) as result:
        pages = []
        for visit in range(3):
            if visit == 2:  # past the time an uncached outcome is shown
                time.sleep(int(context.env["REPLAY_RETRY_AFTER"]) + 1)
            for turn in turns:
                page = f"/s/crash/turns/{turn}/replay/"
                request(context.port, "GET", page)
                seen = run_until_done(context.port, page.removesuffix("replay/"))
                result.statuses[f"outcome {seen['status']}"] += 1
                pages.append(request(context.port, "GET", page))
        shown = sum(shows_internals(page) for page in pages)
        result.notes.append(f"{len(turns)} kernels x 3 visits; pages showing internals: {shown}")
        result.statuses.update(f"page {page.status}" for page in pages)
    return result


FORKERS = iter(range(1, 250))  # a reader of its own for each fork: forks are rate-limited


def new_fork(context: Context, program: str, result: Result) -> str:
    """A reader forks this host program: the fork's page, or "" (noted) when none is made."""
    body, headers = form({"source": VECTOR_ADD, "host": program})
    made = request(
        context.port,
        "POST",
        context.setup["fork_from"],
        body,
        headers | cookie_header(),
        client=f"10.0.1.{next(FORKERS)}",
    )
    result.statuses[f"fork {made.status}"] += 1
    page = made.headers.get("Location", "")
    if made.status != 303 or not page.startswith("/f/"):
        result.notes.append(f"no fork: {made.status} {made.body[:200]!r}")
        return ""
    return page


def hostile_fork(context: Context, name: str, program: str) -> Result:
    """A reader forks this host program; its page is timed alone once its run is done (the
    page cost), then viewed --views times at once by readers without cookies."""
    views = context.views
    with phase(context, name, kernels=1) as result:
        page = new_fork(context, program, result)
        if not page:
            return result
        seen = run_until_done(context.port, page)
        result.statuses[f"outcome {seen['status']}"] += 1
        alone = request(context.port, "GET", page)
        result.notes.append(
            f"page cost: {alone.seconds:.2f} s, {len(alone.body) / 1e6:.2f} MB ({alone.status})"
        )
        # The views apart from the run (whose own cost, a program's, is the row above).
        result.parts.append(f"{name} views")
        context.watch.mark(result.parts[-1])
        answers = at_once(views, lambda: request(context.port, "GET", page))
        result.statuses.update(f"view {answer.status}" for answer in answers)
        slowest = max(answer.seconds for answer in answers)
        result.notes.append(f"{views} views at once: the slowest took {slowest:.2f} s")
    return result


@attack("fork-40-buffers")
def fork_40_buffers(context: Context) -> Result:
    return hostile_fork(context, "fork-40-buffers", HOST_PROGRAM + FORTY_BUFFERS + SUBMIT)


@attack("fork-200x200")
def fork_200x200(context: Context) -> Result:
    return hostile_fork(context, "fork-200x200", HOST_PROGRAM + PASSES_200X200)


# The Messages API our tutor talks to in this run ---------------------------------------------

TRICKLE_PING_S = 5.0
TRICKLE_S = 90.0  # then the stream is cut: the attack ends by itself


def _sse(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


class MessagesAPI(BaseHTTPRequestHandler):
    """POST /v1/messages with stream=true: a short reply at once, or, while `trickle` is
    set, message_start and then only pings until TRICKLE_S has passed."""

    api: FakeAPI

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.api.requests += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        usage = {"input_tokens": 10, "output_tokens": 1}
        start: dict[str, Any] = {"type": "message_start"}
        start["message"] = {"id": "msg_bench", "type": "message"}
        start["message"] |= {"role": "assistant", "model": "claude-sonnet-5-5", "content": []}
        start["message"] |= {"stop_reason": None, "stop_sequence": None, "usage": usage}
        with suppress(OSError):
            self.wfile.write(_sse(start))
            self.wfile.flush()
            if self.api.trickle:
                end = time.monotonic() + TRICKLE_S
                while time.monotonic() < end:
                    self.wfile.write(_sse({"type": "ping"}))
                    self.wfile.flush()
                    time.sleep(TRICKLE_PING_S)
            else:
                block = {"type": "content_block_start", "index": 0}
                self.wfile.write(_sse(block | {"content_block": {"type": "text", "text": ""}}))
                delta = {"type": "text_delta", "text": self.api.reply}
                self.wfile.write(_sse({"type": "content_block_delta", "index": 0, "delta": delta}))
                self.wfile.write(_sse({"type": "content_block_stop", "index": 0}))
                stop = {"stop_reason": "end_turn", "stop_sequence": None}
                message_delta = {"type": "message_delta", "delta": stop}
                self.wfile.write(_sse(message_delta | {"usage": {"output_tokens": 9}}))
                self.wfile.write(_sse({"type": "message_stop"}))
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


ANSWER = "Which element does this invocation own?"


@dataclass
class FakeAPI:
    url: str = ""
    trickle: bool = False
    requests: int = 0
    reply: str = ANSWER  # what Claude says


@contextmanager
def messages_api() -> Iterator[FakeAPI]:
    api = FakeAPI()
    handler = type("Handler", (MessagesAPI,), {"api": api})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    api.url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()


def events_of(body: bytes) -> list[tuple[str, str]]:
    """(name, data) of each server-sent event in a body."""
    found = re.findall(r"^event: (\S+)\ndata: (.*)$", body.decode(errors="replace"), re.MULTILINE)
    return [(name, data) for name, data in found]


@attack("tutor-trickle")
def tutor_trickle(context: Context) -> Result:
    learners = context.setup["learners"]
    with phase(context, "tutor-trickle") as result:
        pages = [start_guided(context, cookie, result) for cookie in learners]

        def say(index: int) -> Answer:
            if not pages[index]:
                return Answer(0, {}, b"", 0.0)
            body, headers = form({"text": "How do I pick my element?"})
            headers |= cookie_header(learners[index]) | {"Accept": "text/event-stream"}
            return request(
                context.port,
                "POST",
                f"{pages[index]}say/",
                body,
                headers,
                timeout=TRICKLE_S + 30,
            )

        context.api.trickle = True
        try:
            with ThreadPoolExecutor(max_workers=len(learners)) as pool:
                answers = list(pool.map(say, range(len(learners))))
        finally:
            context.api.trickle = False
        result.statuses.update(f"say {answer.status}" for answer in answers)
        for answer in answers:
            events = events_of(answer.body) or [("-", answer.body[:100].decode(errors="replace"))]
            name, data = events[-1]
            result.notes.append(f"{answer.seconds:.1f} s, ends with {name}: {data[:110]}")
    return result


# Staff import a large transcript ---------------------------------------------------------------

BIG_IMPORT_LINES = 200_000
SIGN_IN_EVERY_S = 2.0


def big_transcript(lines: int) -> bytes:
    """A learner and the assistant taking turns, one short message a line."""
    key = "00000000-0000-4000-8000-000000200000"
    texts = [
        ("user", f"Question {n}?") if n % 2 else ("assistant", f"Answer {n}.") for n in range(lines)
    ]
    return transcript(texts, key)


def imported(port: int, answer: Answer, cookie: str, give_up_s: float = 600.0) -> Answer:
    """What an upload to /import/ came to: its page once the import is done (the upload
    answers at once with it), or the answer itself where the import ran in the request
    (a root before uploads were imported off the request). Its seconds count from the
    upload's answer to the page that says it is done, plus the upload's own."""
    if answer.status != 303:
        return answer
    url, started = answer.headers["Location"], time.monotonic()
    while True:
        page = request(port, "GET", url, headers=cookie_header(cookie))
        finished = b'http-equiv="refresh"' not in page.body
        if finished or page.status != 200 or time.monotonic() - started > give_up_s:
            page.seconds = answer.seconds + time.monotonic() - started
            return page
        time.sleep(0.2)


def front_page_ms(port: int, times: int = 5) -> float:
    return 1000 * statistics.median(request(port, "GET", "/").seconds for _ in range(times))


def upload_while_signing_in(
    context: Context, body: bytes, headers: dict[str, str], readers: str = ""
) -> tuple[Answer, list[Answer], list[Answer]]:
    """Staff upload to /import/ (followed until its page says it is done) while alice
    signs in every SIGN_IN_EVERY_S and, given a path, a reader without cookies GETs it
    as often: the upload's end, the sign-ins and the reads."""
    curator = context.setup["cookies"]["curator"]
    done: list[Answer] = []
    upload = threading.Thread(
        target=lambda: done.append(
            imported(
                context.port,
                request(
                    context.port,
                    "POST",
                    "/import/",
                    body,
                    headers | cookie_header(curator),
                    timeout=600,
                ),
                curator,
            )
        )
    )
    upload.start()
    signins: list[Answer] = []
    reads: list[Answer] = []
    while upload.is_alive() and len(signins) < 300:
        login, login_headers = form({"username": "alice", "password": PASSWORD})
        signins.append(
            request(
                context.port,
                "POST",
                "/accounts/login/",
                login,
                login_headers | cookie_header(),
                "10.0.0.8",
            )
        )
        if readers:
            reads.append(request(context.port, "GET", readers, client="10.0.0.9"))
        upload.join(SIGN_IN_EVERY_S)
    upload.join()
    return done[0], signins, reads


def big_upload() -> tuple[bytes, dict[str, str], int]:
    content = big_transcript(BIG_IMPORT_LINES)
    fields = {"title": "A long session", "slug": "long", "visibility": "public"}
    body, headers = multipart(fields, "long.jsonl", content)
    return body, headers, len(content)


@attack("big-import")
def big_import(context: Context) -> Result:
    curator = context.setup["cookies"]["curator"]
    body, headers, size = big_upload()
    with phase(context, "big-import") as result:
        before = front_page_ms(context.port)
        answer, signins, _ = upload_while_signing_in(context, body, headers)
        after = front_page_ms(context.port)
        result.statuses[f"import {answer.status}"] += 1
        result.statuses.update(f"sign-in {signin.status}" for signin in signins)
        slowest = max((signin.seconds for signin in signins), default=0.0)
        result.notes.append(
            f"{BIG_IMPORT_LINES:,} lines ({size / 1e6:.0f} MB) imported in "
            f"{answer.seconds:.1f} s; {len(signins)} sign-ins meanwhile, the slowest "
            f"{slowest:.2f} s"
        )
        result.notes.append(
            f"front page: {before:.0f} ms before, {after:.0f} ms after ({after / before:.1f}x)"
        )
        for path in ("/s/long/", "/s/long/?page=1000"):
            page = request(context.port, "GET", path, headers=cookie_header(curator))
            result.notes.append(
                f"{path} (uncached, staff): {page.seconds:.2f} s, "
                f"{len(page.body) / 1e3:.0f} KB ({page.status})"
            )
    return result


@attack("big-reimport")
def big_reimport(context: Context) -> Result:
    """The same upload again, a re-import of the session big-import made (made first,
    untimed, when big-import did not run): sign-ins, and a reader of its last page."""
    body, headers, _ = big_upload()
    if request(context.port, "GET", "/s/long/").status != 200:
        upload_while_signing_in(context, body, headers)
    with phase(context, "big-reimport") as result:
        answer, signins, reads = upload_while_signing_in(
            context, body, headers, readers="/s/long/?page=1000"
        )
        result.statuses[f"import {answer.status}"] += 1
        result.statuses.update(f"sign-in {signin.status}" for signin in signins)
        result.statuses.update(f"read {read.status}" for read in reads)
        slowest = max((signin.seconds for signin in signins), default=0.0)
        read = max((read.seconds for read in reads), default=0.0)
        result.notes.append(
            f"re-imported in {answer.seconds:.1f} s; {len(signins)} sign-ins meanwhile, the "
            f"slowest {slowest:.2f} s; the slowest read of the session's last page {read:.2f} s"
        )
    return result


@attack("sign-in")
def sign_in(context: Context) -> Result:
    with phase(context, "sign-in") as result:
        for _ in range(30):
            body, headers = form({"username": "alice", "password": "guess"})
            answer = request(
                context.port,
                "POST",
                "/accounts/login/",
                body,
                headers | cookie_header(),
                "10.6.6.6",
            )
            result.statuses[f"guess {answer.status}"] += 1
        body, headers = form({"username": "alice", "password": PASSWORD})
        answer = request(
            context.port, "POST", "/accounts/login/", body, headers | cookie_header(), "10.0.0.7"
        )
        result.statuses[f"alice {answer.status}"] += 1
        result.notes.append(
            "alice signs in from elsewhere" if answer.status == 302 else "alice is locked out"
        )
    return result


@attack("bad-urls")
def bad_urls(context: Context) -> Result:
    cases = [
        ("q NUL", "/?q=a%00b", {}),
        ("turn 4301 digits", "/s/crash/?turn=" + "9" * 4301, {}),
        ("turn 4000 digits", "/s/crash/?turn=" + "9" * 4000, {}),
        ("turn 20 digits", "/s/crash/?turn=" + "9" * 20, {}),
        ("replay 20 digits", "/s/crash/turns/" + "9" * 20 + "/replay/", {}),
        ("wait nan", "/s/host/turns/1/replay.json?wait=nan", {}),
        ("oembed [::1", "/oembed/?url=http://[::1", {}),
        ("oembed port", "/oembed/?url=http://kernelbin.test:99999/s/x/", {}),
        ("Host evil", "/", {"Host": "evil.example"}),
        ("Host [::1", "/", {"Host": "[::1"}),
        ("Host 404 evil", "/no-such-page/", {"Host": "evil.example"}),
    ]
    with phase(context, "bad-urls") as result:
        for label, path, headers in cases:
            answer = request(context.port, "GET", path, headers=headers)
            result.statuses[f"{label} {answer.status}"] += 1
            if label.startswith("Host") and "X-Frame-Options" not in answer.headers:
                result.notes.append(f"{label}: no X-Frame-Options")
    return result


@attack("tag-oracle")
def tag_oracle(context: Context) -> Result:
    with phase(context, "tag-oracle") as result:
        for label, slug in (("private tag", "secret-tag"), ("no tag", "no-such-tag")):
            answer = request(context.port, "GET", f"/?tag={slug}")
            result.statuses[f"{label} {answer.status}"] += 1
            if b"Secret Tag" in answer.body:
                result.notes.append(f"{label}: the private tag's name is on the page")
    return result


BLOG = """<!doctype html>
<html><body>
<p><a class="kernelbin-embed" id="js" href="javascript:window.ran = true">A session</a></p>
<iframe class="kernelbin-embed" id="foreign" src="/tall.html" height="150"></iframe>
<script async src="{origin}/static/js/embed.js"></script>
</body></html>
"""
TALL = """<!doctype html><script>
parent.postMessage({ type: "kernelbin:embed-height", height: 19999 }, "*");
</script>"""


@attack("embed-link")
def embed_link(context: Context) -> Result:
    """A blog (another loopback origin) loads embed.js from us through Chromium."""
    with phase(context, "embed-link") as result:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            result.notes.append("skipped: playwright is not installed")
            return result
        with tempfile.TemporaryDirectory() as folder, static_site(Path(folder)) as blog:
            # Chromium reaches us by our host name, through the proxy we play.
            ours = f"http://{HOST}:{context.port}"
            (Path(folder) / "post.html").write_text(BLOG.format(origin=ours))
            (Path(folder) / "tall.html").write_text(TALL)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path="/usr/bin/chromium",
                    args=["--no-sandbox", f"--host-resolver-rules=MAP {HOST} 127.0.0.1"],
                )
                try:
                    page = browser.new_page(extra_http_headers={"X-Forwarded-Proto": "https"})
                    page.goto(f"{blog}/post.html")
                    page.wait_for_function("window.kernelbinEmbed !== undefined", timeout=10_000)
                    page.wait_for_timeout(1500)
                    ran = page.evaluate("window.ran === true")
                    link = page.evaluate("document.getElementById('js') ? 'a' : 'iframe'")
                    height = page.evaluate(
                        "document.getElementById('foreign').getBoundingClientRect().height"
                    )
                finally:
                    browser.close()
        result.statuses[f"javascript: link {'ran' if ran else 'did not run'}"] += 1
        result.notes.append(
            f"the javascript: link is now an <{link}>; the foreign frame is "
            f"{height:.0f} px tall (it asked for 19,999)"
        )
    return result


@contextmanager
def static_site(folder: Path) -> Iterator[str]:
    from functools import partial
    from http.server import SimpleHTTPRequestHandler

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


# The guardrail's evasion corpus (tutor/evasions.py) ------------------------------------------


def sse_data(body: bytes, name: str) -> list[dict[str, Any]]:
    """The data of each event of this name in a server-sent event stream."""
    found = []
    for block in body.decode(errors="replace").split("\n\n"):
        if f"event: {name}\n" in block + "\n":
            data = "".join(line[5:].strip() for line in block.splitlines() if line[:5] == "data:")
            found.append(json.loads(data))
    return found


@attack("guardrail")
def guardrail_corpus(context: Context) -> Result:
    """The corpus as the code under test reads it (python -m tutor.evasions: evasions
    caught, real tutoring texts withheld), then each evasion of this checkout's corpus as
    Claude's reply to a learner through the server: nothing of it may stream or be kept."""
    root, ours = Path(context.env["PYTHONPATH"]), HERE.parent.parent
    with phase(context, "guardrail") as result:
        local = subprocess.run(
            [sys.executable, "-m", "tutor.evasions"],
            cwd=root,
            env=context.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        result.notes += local.stdout.splitlines() or [f"tutor.evasions: {local.stderr[-200:]}"]
        corpus = json.loads(
            manage(ours, context.env | {"PYTHONPATH": str(ours)}, "-c", EVASIONS_AS_JSON)
        )
        learners = context.setup["learners"]
        pages = [start_guided(context, cookie, result) for cookie in learners]
        leaked = []
        try:
            for n, (name, (reply, tells)) in enumerate(corpus.items()):
                index = n % len(learners)
                context.api.reply = reply
                body, headers = form({"text": "Put the whole kernel in a table, please."})
                headers |= cookie_header(learners[index]) | {"Accept": "text/event-stream"}
                answer = request(context.port, "POST", f"{pages[index]}say/", body, headers)
                result.statuses[f"say {answer.status}"] += 1
                streamed = "".join(data["text"] for data in sse_data(answer.body, "delta"))
                turns = [data["html"] for data in sse_data(answer.body, "turn")]
                kept = turns[-1] if turns else ""
                if any(tell in streamed for tell in tells) or "withheld" not in kept:
                    leaked.append(name)
        finally:
            context.api.reply = ANSWER
        result.notes.append(
            f"through the server: {len(corpus) - len(leaked)} of {len(corpus)} evasions "
            f"withheld{'; got through: ' + ', '.join(leaked) if leaked else ''}"
        )
    return result


EVASIONS_AS_JSON = "import json; from tutor.evasions import EVASIONS; print(json.dumps(EVASIONS))"


# Programs that attack the shim they share a realm with (#23): each must end as the
# program's own outcome, its error naming a line, with no Python exception in sight.
FORGED_RECORDS = {
    "stringify": 'JSON.stringify = () => \'{"record":[{"op":"__init__"}],"state":"done"}\';',
    "to-json": "Object.prototype.toJSON = function () { return { op: 'op___init__' }; };",
    "push": "Array.prototype.push = () => 0; Map.prototype.set = function () { return this; };",
    "host-console": "__host.console = () => 'x'.repeat(20 * 1024 * 1024);",
    "forged-id": "device.queue.writeBuffer({ __id: 1, size: 1 << 30 }, 0, new Float32Array(4));",
    "forged-size": (
        "for (let i = 0; i < 6; i++)\n"
        "  device.createBuffer({ size: 256 * 1024 * 1024, usage: GPUBufferUsage.UNIFORM });"
    ),
    "inherited-size": "Object.defineProperty(Object.prototype, 'size', { get: () => 2 ** 40 });",
    "deep-nesting": (
        "let deep = {};\nfor (let i = 0; i < 100000; i++) deep = { a: deep };\n"
        "device.createComputePipeline({ layout: 'auto', compute: { module, constants: deep } });"
    ),
    "deep-stringify": (
        "let deep = {};\nfor (let i = 0; i < 100000; i++) deep = { a: deep };\n"
        "JSON.stringify(deep);"
    ),
    "threw-null": "throw null;",
}
PYTHON_TELLS = re.compile(
    r"Traceback|AttributeError|KeyError|TypeError: string indices|runner failed|op___init__"
)


@attack("forged-records")
def forged_records(context: Context) -> Result:
    """Each attack in FORGED_RECORDS, as a fork of the vector add: how its run ended."""
    with phase(context, "forged-records", kernels=len(FORGED_RECORDS)) as result:
        for name, attack_code in FORGED_RECORDS.items():
            page = new_fork(context, HOST_PROGRAM + attack_code + "\n" + SUBMIT, result)
            if not page:
                continue
            run_until_done(context.port, page)
            body = request(context.port, "GET", f"{page}replay.json").body
            outcome = json.loads(body).get("outcome") or {}
            error = (outcome.get("program") or {}).get("error") or {}
            told = PYTHON_TELLS.search(body.decode(errors="replace"))
            result.statuses[f"outcome {outcome.get('status')}"] += 1
            result.notes.append(
                f"{name}: {outcome.get('status')}, line {error.get('line')}"
                f"{', PYTHON TEXT: ' + told.group(0) if told else ''}: "
                f"{str(outcome.get('message', ''))[:110]}"
            )
    return result


# What a program controls, at its largest, and loops QuickJS cannot stop by itself (#23, #30).
HUGE_LABELS = """const huge = 'L'.repeat(20 * 1024 * 1024);
for (let i = 0; i < 5; i++) device.createBuffer({ label: huge + i, size: 16, usage });
"""
HUGE_ERROR = "throw new Error('E'.repeat(32 * 1024 * 1024));\n"
BACKTRACKING = "/(a+)+b/.test('a'.repeat(40));\n"
ENDLESS = "let spins = 0;\nwhile (true) spins++;\n"


@attack("fork-huge-labels")
def fork_huge_labels(context: Context) -> Result:
    return hostile_fork(context, "fork-huge-labels", HOST_PROGRAM + HUGE_LABELS + SUBMIT)


@attack("fork-32mib-error")
def fork_32mib_error(context: Context) -> Result:
    return hostile_fork(context, "fork-32mib-error", HOST_PROGRAM + HUGE_ERROR)


@attack("fork-backtracking-regex")
def fork_backtracking_regex(context: Context) -> Result:
    return hostile_fork(context, "fork-backtracking-regex", HOST_PROGRAM + BACKTRACKING)


@attack("fork-endless-loop")
def fork_endless_loop(context: Context) -> Result:
    return hostile_fork(context, "fork-endless-loop", HOST_PROGRAM + ENDLESS)


@attack("idle-after")
def idle_after(context: Context) -> Result:
    with phase(context, "idle-after") as result:
        time.sleep(5.0)
    return result


def run_attack(context: Context, name: str, function: Callable[[Context], Result]) -> Result:
    """The attack's result; one that failed is noted with its error and the run goes on."""
    try:
        return function(context)
    except Exception as error:
        context.watch.mark("between")
        return Result(name, notes=[f"the attack failed: {type(error).__name__}: {error}"])


# -- the server ----------------------------------------------------------------------------------


def server_env(root: Path, database: Path, api: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DJANGO")}
    env.pop("ANTHROPIC_BASE_URL", None)
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
        "ANTHROPIC_API_KEY": "sk-ant-bench-not-a-key",
        "TUTOR_BASE_URL": api,
        "LOG_LEVEL": "ERROR",
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def gunicorn(root: Path, env: dict[str, str], log: Path, workers: int) -> Iterator[tuple[int, int]]:
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


def p95(times: list[float]) -> float:
    return statistics.quantiles(times, n=20)[-1] if len(times) > 1 else max(times, default=0.0)


def report(watch: Watch, results: list[Result]) -> None:
    def during(name: str) -> list[float]:
        return [seconds for at, seconds, _ in watch.probes if watch.phase_at(at) == name]

    quiet = during("idle")
    print(
        f"{'attack':21} {'probes':>6} {'p95':>7} {'x idle':>6} {'max':>7} {'>200ms':>6} "
        f"{'replay died':>11} {'web died':>8}  statuses"
    )
    for result in results:
        for part in (result.attack, *result.parts):
            times = during(part)
            stalled = sum(seconds > STALL_S for seconds in times)
            died = Counter(kind for at, kind in watch.deaths if watch.phase_at(at) == part)
            ratio = f"{p95(times) / p95(quiet):.1f}" if quiet and times and p95(quiet) else "-"
            statuses = ", ".join(f"{k}: {n}" for k, n in sorted(result.statuses.items()))
            print(
                f"{part:21} {len(times):>6} {1000 * p95(times):>5.0f}ms {ratio:>6} "
                f"{1000 * max(times, default=0):>5.0f}ms {stalled:>6} {died['replay']:>11} "
                f"{died['web']:>8}  {statuses if part == result.attack else ''}"
            )
        for note in result.notes:
            print(f"{'':23}{note}")
    probe_statuses = Counter(status for _, _, status in watch.probes)
    print(f"/healthz answers: {dict(sorted(probe_statuses.items()))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=HERE.parent.parent)
    parser.add_argument("--budget", type=int, default=2400, help="seconds for the whole run")
    parser.add_argument("--log", type=Path, help="keep gunicorn's log in this file")
    parser.add_argument(
        "--only",
        help="comma-separated attacks to run (idle always runs first): "
        + ", ".join(name for name, _ in ATTACKS),
    )
    parser.add_argument(
        "--web-workers",
        type=int,
        default=2,
        help="gunicorn processes (1 shows what a request that holds its process does to others)",
    )
    parser.add_argument("--views", type=int, default=16, help="views of each hostile fork")
    parser.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.prepare:
        prepare()
        return
    chosen = ATTACKS
    if args.only:
        names = {"idle", *args.only.split(",")}
        unknown = names - {name for name, _ in ATTACKS}
        if unknown:
            parser.error(f"no attack named {', '.join(sorted(unknown))}")
        chosen = [(name, function) for name, function in ATTACKS if name in names]
    signal.signal(signal.SIGALRM, lambda *_: sys.exit("the run went over its budget"))
    signal.alarm(args.budget)
    root = args.root.resolve()
    with tempfile.TemporaryDirectory(prefix="kernelbin-attacks-") as scratch, messages_api() as api:
        env = server_env(root, Path(scratch) / "attacks.sqlite3", api.url)
        setup = json.loads(manage(root, env, str(HERE), "--prepare"))
        manage(root, env, "manage.py", "collectstatic", "--noinput", "-v0")
        log = args.log or Path(scratch) / "gunicorn.log"
        with gunicorn(root, env, log, args.web_workers) as (port, master):
            watch = Watch(port, master).start()
            time.sleep(2)
            context = Context(watch, setup, env, api, args.views)
            results = [run_attack(context, name, function) for name, function in chosen]
            watch.stop()
        print(
            f"root: {root} ({git_head(root)}), gunicorn {args.web_workers} x 4 threads, "
            f"production settings, {os.cpu_count()} cores, load average "
            f"{os.getloadavg()[0]:.1f} at the end"
        )
        report(watch, results)


def git_head(root: Path) -> str:
    head = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return head.stdout.strip() or "?"


if __name__ == "__main__":
    main()
