"""A harness case's verdict: its outputs against the reference, the cells a diagnostic run
found never written, the buffers its report shows, and how a case goes into an outcome's
list of cases (kernels/engine/run.py runs the cases)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernels.engine.compare import (
    classification_report,
    compare_output,
    mark_unwritten,
    no_reference_message,
    verdict,
)
from kernels.engine.harness import Harness
from kernels.engine.host.gpu import SENTINEL_WORD
from kernels.engine.host.trace import Trace
from kernels.engine.outcome import PassRecord, SpeedReport, Status, WholeBuffer


@dataclass
class CaseResult:
    """One case's verdict; a harness without cases is one unnamed case."""

    name: str
    description: str
    status: Status
    message: str
    outputs: list[dict[str, Any]]
    report: dict[str, Any] | None
    layout: list[dict[str, Any]]
    store_counts: list[dict[str, Any]] = field(default_factory=list)
    trace: Trace | None = None
    passes: list[PassRecord] = field(default_factory=list)
    speed: SpeedReport | None = None
    whole: WholeBuffer | None = None  # the buffer its job asked to keep whole

    def as_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": self.name,
            "status": str(self.status),
            "message": self.message,
            "outputs": self.outputs,
            "layout": self.layout,
        }
        if self.description:
            entry["description"] = self.description
        if self.report is not None:
            entry["report"] = self.report
        return entry


def compare_case(
    harness: Harness,
    host: dict[str, np.ndarray],
    got: dict[str, np.ndarray],
    expected: dict[str, np.ndarray],
    diagnostic: dict[str, np.ndarray] | None,
    passed: dict[str, dict[str, Any]],
) -> CaseResult:
    """Each output against the reference (cells wrong here and never written in the
    diagnostic run marked so; passed holds those the device passed), then the buffers
    the report asks to see."""
    atol, rtol = harness.tolerance.atol, harness.tolerance.rtol
    names = list(harness.reference.outputs) if harness.reference else _shown(harness, got)
    outputs = []
    for name in names:
        if name in passed:
            outputs.append(passed[name])
            continue
        buf = harness.buffer(name)
        # An output no pass binds was never written: it still holds its start value.
        values = got[name] if name in got else host[name]
        want = expected.get(name)
        if diagnostic is not None and want is not None and name in diagnostic:
            values = mark_unwritten(values, want, diagnostic[name], SENTINEL_WORD, atol, rtol)
        outputs.append(compare_output(buf, values, want, atol, rtol))
    checked = list(outputs)
    report = None
    if harness.report is not None:
        for name in harness.report.show:
            if name not in names:
                values = got[name] if name in got else host[name]
                shown = compare_output(harness.buffer(name), values, None, atol, rtol)
                outputs.append({**shown, "intermediate": True})
        if harness.report.kind:
            probs = got.get(harness.report.probabilities, host[harness.report.probabilities])
            labels = got.get(harness.report.labels, host[harness.report.labels])
            report = classification_report(probs, labels)
    if harness.reference is None:
        message = no_reference_message(outputs)
        return CaseResult("", "", Status.NO_REFERENCE, message, outputs, report, [])
    status, message = verdict(checked)
    return CaseResult("", "", status, message, outputs, report, [])


def _shown(harness: Harness, got: dict[str, np.ndarray]) -> list[str]:
    report = set()
    if harness.report is not None:
        report = {harness.report.probabilities, harness.report.labels, *harness.report.show}
    marked = [b.name for b in harness.outputs()]
    return marked or [name for name in got if name not in report]


def case_entry(result: CaseResult, shown: bool) -> dict[str, Any]:
    """A case in the outcome's list; the values of its cells only for the case shown at the
    top (the worst), so sixty-four cases do not carry sixty-four copies of every output."""
    entry = result.as_dict()
    if not shown:
        entry["outputs"] = [
            {key: value for key, value in output.items() if key not in ("got", "expected")}
            for output in result.outputs
        ]
    return entry
