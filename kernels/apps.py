from django.apps import AppConfig
from django.core.signals import request_finished


class KernelsConfig(AppConfig):
    name = "kernels"
    verbose_name = "Kernels and replays"

    def ready(self) -> None:
        from kernels import replay

        # A reader's replay is answered before its outcome is stored; the store follows
        # once the response has gone (replay.wait's answer_first).
        request_finished.connect(replay.store_answered, dispatch_uid="kernels.replay")
