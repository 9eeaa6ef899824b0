from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from kernels.recorded import record


class Command(BaseCommand):
    help = (
        "Store the Triton and CUDA showcase's outcomes recorded on a GPU "
        "(fixtures/triton_cuda/h100_outcomes.json) as the runs of the versions they are of."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        folder = settings.FIXTURES_DIR / "triton_cuda"
        stored = record(folder / "h100_outcomes.json", folder / "programs")
        self.stdout.write(f"Stored {stored} recorded GPU run(s).")
