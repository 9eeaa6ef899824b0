from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from kernels import replay
from kernels.engine.outcome import Outcome, json_number, output_list
from kernels.engine.pool import Pool
from kernels.engine.run_warnings import warnings_of
from sessions.models import Session


def describe(outcome: Outcome) -> str:
    """The outcome as a reader would want it in a terminal."""
    lines = [f"{outcome['status']}: {outcome['message']}"]
    if compile_error := outcome.get("compile"):
        lines.append(compile_error.get("text", "").rstrip())
    elif outcome.get("error") and outcome["status"] != "timeout":
        lines.append(outcome["error"].rstrip())
    for case in outcome.get("cases", []):
        lines.append(f"  case {case['name']}: {case['status']}: {case['message']}")
    for output in outcome.get("outputs", []):
        lines += _output_lines(output)
    for layout in outcome.get("layout", []):
        lines.append(_layout_line(layout))
    if report := outcome.get("report"):
        lines.append(f"  accuracy {report['accuracy']:.2%} on {report['count']} samples")
    environment = outcome.get("environment") or {}
    timings: Mapping[str, object] = outcome.get("timings") or {}
    if environment.get("label"):
        spent = [
            f"{label} {timings[key]:.1f} ms"
            for key, label in (("compile_ms", "compile"), ("run_ms", "dispatch+readback"))
            if timings.get(key) is not None
        ]
        lines.append(f"ran on {environment['label']}; " + ", ".join(spent))
    lines += [f"warning ({w['code']}): {w['text']}" for w in warnings_of(outcome)]
    return "\n".join(lines)


def _output_lines(output: dict[str, Any]) -> list[str]:
    shape = "x".join(str(n) for n in output["shape"])
    name = f"  {output['name']} [{shape}]"
    if output["bad"] is None:
        role = "intermediate, shown" if output.get("intermediate") else "shown"
        return [f"{name}: {role}, {output['count']} cells"]
    lines = [
        f"{name}: {output['bad']} wrong, {output['unwritten']} never "
        f"written, {output['nonfinite']} NaN/inf of {output['count']}"
    ]
    for cell in output.get("first_bad", [])[:5]:
        got = "nothing (never written)" if cell["got"] is None else cell["got"]
        lines.append(f"    at {cell['index']}: expected {cell['expected']}, got {got}")
    return lines


def readable(outcome: Outcome) -> dict[str, Any]:
    """The outcome with its outputs' cells as JSON lists (packed, they are base64)."""

    def unpacked(output: dict[str, Any]) -> dict[str, Any]:
        cells = {key: output_list(output, key) for key in ("got", "expected") if key in output}
        return {
            **output,
            **{
                key: [v if v is None or isinstance(v, int) else json_number(v) for v in values]
                for key, values in cells.items()
                if values is not None
            },
        }

    shown: dict[str, Any] = {**outcome, "outputs": [unpacked(o) for o in outcome["outputs"]]}
    if "cases" in outcome:
        shown["cases"] = [
            {**case, "outputs": [unpacked(o) for o in case["outputs"]]} for case in outcome["cases"]
        ]
    return shown


def _layout_line(layout: dict[str, Any]) -> str:
    """A struct buffer's bytes: each field at its offset, then the padding."""
    fields = ", ".join(
        f"{f['name']}@{f['offset']} {f['type']} = {f['values']}" for f in layout["fields"]
    )
    padding = ", ".join(f"{p['size']} at {p['offset']}" for p in layout["padding"]) or "none"
    return (
        f"  {layout['buffer']}: struct {layout['struct']}, {layout['size']} bytes: "
        f"{fields}; padding {padding}"
    )


def _sources(paths: list[Path]) -> dict[str, str]:
    """The first file is the kernel replayed ("self"); the others are the kernels a
    harness's passes name, each by its file name without .wgsl."""
    sources: dict[str, str] = {}
    for number, path in enumerate(paths):
        name = "self" if number == 0 else path.stem
        if name in sources:
            raise CommandError(f"Two sources are named {name!r}: rename one of the files.")
        sources[name] = path.read_text()
    return sources


class Command(BaseCommand):
    help = (
        "Run a WGSL kernel under a harness and print the outcome: either files "
        "(--source, --harness) or a stored session turn (--session, --turn)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--source",
            type=Path,
            action="append",
            help="a .wgsl file; give it again for the other kernels a harness's passes "
            "name (a pass with kernel 'relu' runs relu.wgsl)",
        )
        parser.add_argument(
            "--harness", type=Path, help="a harness .json file (omit: compile only)"
        )
        parser.add_argument("--session", help="a session slug")
        parser.add_argument("--turn", type=int, help="a turn number in that session")
        parser.add_argument("--fresh", action="store_true", help="ignore a cached run")
        parser.add_argument("--json", action="store_true", help="print the outcome as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["session"] and options["turn"]:
            outcome = self._stored(options["session"], options["turn"], options["fresh"])
        elif options["source"]:
            outcome = self._files(options["source"], options["harness"])
        else:
            raise CommandError("Give --source [--harness], or --session and --turn.")
        if options["json"]:
            self.stdout.write(json.dumps(readable(outcome), indent=2))
        else:
            self.stdout.write(describe(outcome))

    def _files(self, paths: list[Path], harness: Path | None) -> Outcome:
        try:
            sources = _sources(paths)
            spec = json.loads(harness.read_text()) if harness else None
        except OSError as error:
            raise CommandError(f"Cannot read {error.filename}: {error.strerror}") from None
        except UnicodeDecodeError:
            raise CommandError("The source and harness must be UTF-8 text.") from None
        except json.JSONDecodeError as error:
            raise CommandError(f"{harness}: not JSON ({error.msg}, line {error.lineno})") from None
        job = {"sources": sources, "harness": spec, "fixtures_dir": str(settings.FIXTURES_DIR)}
        # A one-off pool: the same process boundary, deadline and limits as on the site.
        with Pool(
            size=1, deadline=settings.REPLAY_DEADLINE, backend=settings.REPLAY_WGPU_BACKEND
        ) as pool:
            return pool.run(f"cli:{paths[0]}", job)

    def _stored(self, slug: str, number: int, fresh: bool) -> Outcome:
        session = Session.objects.filter(slug=slug).first()
        if session is None:
            raise CommandError(f"No session '{slug}'.")
        turn = session.turns.filter(number=number).select_related("kernel_version").first()
        if turn is None or turn.kernel_version is None:
            raise CommandError(f"Turn {number} of '{slug}' does not review a kernel.")
        # At a terminal, waiting longer beats being told to try again.
        timeout = settings.REPLAY_DEADLINE * 3
        shown = replay.run_now(turn.kernel_version, fresh=fresh, timeout=timeout)
        if shown.outcome is None:
            raise CommandError(shown.problem or shown.busy)
        return shown.outcome
