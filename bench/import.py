"""Importing Claude Code transcripts of 25, 50 and 100 MB: speed, and memory against size.

    .venv/bin/python bench/import.py [--sizes 25 50 100] [--keep DIR]

Transcripts are generated in the real format (tests/sessions/transcripts/build.py): a
tutoring session repeated until the size is reached, each exchange a prompt, a streamed
answer (thinking, text, tool calls on separate lines sharing a message.id), tool results
(file reads of a few KB, shell output, greps), Write/Edit calls on .wgsl files with
their toolUseResult (originalFile included, as Claude Code writes it), hook progress
lines and file-history snapshots.

Each size is imported twice, each time in a fresh subprocess on a fresh scratch SQLite
database: once timed (lines/s, MB/s, and ru_maxrss growth over the process's size
after Django started), once under tracemalloc (peak of Python allocations during the
import). The import streams the file and never holds its content; what grows with the
file is only the compact line index of pass 1 (about 60 bytes a line, see
sessions/importers/claude_code/index.py), so memory grows far slower than the file.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, setup_django

sys.path.insert(0, str(ROOT))

MB = 1024 * 1024
GUARD = "    if (id.x >= n || id.y >= n) {\n        return;\n    }\n    var sum = 0.0;\n"


def generate(path: Path, megabytes: int) -> int:
    """Write a transcript of about `megabytes` MB; return its line count."""
    from tests.sessions.transcripts.build import CWD, MATMUL_V2, Transcript, text

    t = Transcript(f"bench-{megabytes}")
    lines_written = 0
    target = megabytes * MB
    written = 0
    parent = None
    with path.open("w", encoding="utf-8") as handle:

        def flush() -> None:
            nonlocal written, lines_written
            for line in t.lines:
                data = json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n"
                handle.write(data)
                written += len(data.encode())
                lines_written += 1
            t.lines.clear()

        round_no = 0
        while written < target:
            round_no += 1
            kernel = f"{CWD}/kernels/k{round_no % 12}.wgsl"
            source = MATMUL_V2.replace("main(", f"main{round_no}(")
            read_text = source * 6  # a few KB, like a real file read
            t.user(
                f"Round {round_no}: can you look at {kernel} and tell me why row 64 is wrong?",
                parent=parent,
            )
            calls = t.assistant(
                f"msg_{round_no:06d}A",
                [
                    {
                        "type": "thinking",
                        "thinking": "Check dispatch vs workgroup size. " * 8,
                        "signature": "Sig" * 30,
                    },
                    text("Let me read the kernel and the dispatch code first. " * 3),
                    {
                        "type": "tool_use",
                        "id": f"toolu_{round_no}_r",
                        "name": "Read",
                        "input": {"file_path": kernel},
                    },
                    {
                        "type": "tool_use",
                        "id": f"toolu_{round_no}_g",
                        "name": "Grep",
                        "input": {"pattern": "dispatch", "path": CWD},
                    },
                ],
                stop_reason="tool_use",
            )
            t.add(
                t.envelope(
                    "progress",
                    calls[2],
                    data={"type": "hook_progress", "hookEvent": "PreToolUse"},
                    toolUseID=f"toolu_{round_no}_r",
                ),
                chain=False,
            )
            t.result(
                f"toolu_{round_no}_g",
                "src/main.js:41: pass.dispatchWorkgroups(n / 16)\n" * 20,
                parent=calls[3],
            )
            t.result(
                f"toolu_{round_no}_r",
                "".join(f"{k:>6}\t{x}\n" for k, x in enumerate(read_text.splitlines(), 1)),
                {
                    "type": "text",
                    "file": {
                        "filePath": kernel,
                        "content": read_text,
                        "numLines": 5,
                        "startLine": 1,
                        "totalLines": 99,
                    },
                },
                parent=calls[2],
                chain=False,
            )
            t.assistant(
                f"msg_{round_no:06d}B",
                [
                    text("The guard is missing, so invocations past n write out of bounds. Fix:"),
                    {
                        "type": "tool_use",
                        "id": f"toolu_{round_no}_w",
                        "name": "Write",
                        "input": {"file_path": kernel, "content": source},
                    },
                ],
                stop_reason="tool_use",
            )
            t.result(
                f"toolu_{round_no}_w",
                f"File created successfully at: {kernel}",
                {
                    "type": "create",
                    "filePath": kernel,
                    "content": source,
                    "originalFile": None,
                    "structuredPatch": [],
                },
            )
            t.assistant(
                f"msg_{round_no:06d}C",
                [
                    {
                        "type": "tool_use",
                        "id": f"toolu_{round_no}_e",
                        "name": "Edit",
                        "input": {
                            "file_path": kernel,
                            "old_string": "    var sum = 0.0;\n",
                            "new_string": GUARD,
                        },
                    }
                ],
                stop_reason="tool_use",
            )
            t.result(
                f"toolu_{round_no}_e",
                f"The file {kernel} has been updated.",
                {
                    "filePath": kernel,
                    "oldString": "    var sum = 0.0;\n",
                    "newString": GUARD,
                    "originalFile": source,
                    "structuredPatch": [],
                    "userModified": False,
                },
            )
            t.assistant(
                f"msg_{round_no:06d}D",
                [
                    {
                        "type": "tool_use",
                        "id": f"toolu_{round_no}_b",
                        "name": "Bash",
                        "input": {"command": "npm test", "description": "Run the tests"},
                    }
                ],
                stop_reason="tool_use",
            )
            t.result(
                f"toolu_{round_no}_b",
                "PASS kernels/matmul.test.js\n  ✓ matches numpy (12 ms)\n" * 30,
                {"stdout": "…", "stderr": "", "interrupted": False},
            )
            t.assistant(
                f"msg_{round_no:06d}E",
                [text("All green. Notice how the guard keeps the extra invocations idle. " * 4)],
            )
            t.plain(
                {
                    "type": "file-history-snapshot",
                    "messageId": f"msg_{round_no:06d}E",
                    "snapshot": {
                        "trackedFileBackups": {kernel: {"backupFileName": "x@v1", "version": 1}}
                    },
                }
            )
            parent = t.last
            flush()
    return lines_written


def child(path: Path, mode: str) -> None:
    """One import in this (fresh) process; prints its figures as JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        setup_django(Path(tmp) / "bench.sqlite3")
        import tracemalloc

        from sessions.importers.files import import_file

        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if mode == "trace":
            tracemalloc.start()
        started = time.perf_counter()
        with path.open("rb") as stream:
            report = import_file(stream, name=path.name)
        elapsed = time.perf_counter() - started
        figures = {
            "seconds": elapsed,
            "turns": report.turns,
            "versions": report.versions,
            "lines": report.lines,
            "rss_growth_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024,
        }
        if mode == "trace":
            figures["traced_peak_mb"] = tracemalloc.get_traced_memory()[1] / MB
            tracemalloc.stop()
        print(json.dumps(figures))


def run_child(path: Path, mode: str) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", str(path), "--mode", mode]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=os.environ)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[25, 50, 100])
    parser.add_argument("--keep", type=Path, help="write the transcripts here and keep them")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="time", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.mode)
        return

    folder = args.keep or Path(tempfile.mkdtemp(prefix="kernelbin-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(
        f"{'size':>6} {'lines':>8} {'turns':>7} {'vers':>6} {'seconds':>8} {'lines/s':>8} "
        f"{'MB/s':>6} {'rss +MB':>8} {'traced peak MB':>15}"
    )
    try:
        for size in args.sizes:
            path = folder / f"bench-{size}mb.jsonl"
            generate(path, size)
            actual = path.stat().st_size / MB
            timed = run_child(path, "time")
            traced = run_child(path, "trace")
            print(
                f"{actual:5.0f}M {timed['lines']:>8,} {timed['turns']:>7,} {timed['versions']:>6,} "
                f"{timed['seconds']:>8.1f} {timed['lines'] / timed['seconds']:>8,.0f} "
                f"{actual / timed['seconds']:>6.1f} {timed['rss_growth_mb']:>8.1f} "
                f"{traced['traced_peak_mb']:>15.1f}",
                flush=True,
            )
            if not args.keep:
                path.unlink()
    finally:
        if not args.keep:
            for leftover in folder.glob("*"):
                leftover.unlink()
            folder.rmdir()


if __name__ == "__main__":
    main()
