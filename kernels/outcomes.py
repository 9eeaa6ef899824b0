"""The statuses a replay can end in. Shared by the runner, the pool and the web side.

No Django here: the runner and its worker processes import this module.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    PASSED = "passed"
    MISMATCH = "mismatch"
    NONFINITE = "nonfinite"
    COMPILE_ERROR = "compile_error"
    PIPELINE_ERROR = "pipeline_error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    REJECTED = "rejected"
    NO_REFERENCE = "no_reference"
    INFRA_ERROR = "infra_error"

    @property
    def label(self) -> str:
        return LABELS[self]

    @property
    def cacheable(self) -> bool:
        """A finished run is reused for the same inputs; a run cut short by us is not."""
        return self not in (Status.TIMEOUT, Status.INFRA_ERROR, Status.CRASHED)


LABELS = {
    Status.PASSED: "passed",
    Status.MISMATCH: "wrong results",
    Status.NONFINITE: "NaN or infinity in the output",
    Status.COMPILE_ERROR: "does not compile",
    Status.PIPELINE_ERROR: "pipeline or binding error",
    Status.TIMEOUT: "timed out",
    Status.CRASHED: "crashed",
    Status.REJECTED: "rejected before running",
    Status.NO_REFERENCE: "ran (nothing to compare with)",
    Status.INFRA_ERROR: "could not run (no GPU adapter)",
}
