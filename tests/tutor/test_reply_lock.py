"""The reply lock dies with the request holding it: a server killed mid-reply frees it at
once on this host, a short lease frees it on any other, and a heartbeat keeps the lease
of a reply still being written."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import timedelta

from django.utils import timezone

from config import processes
from tests.tutor.helpers import TutorRunTestCase, TutorTestCase, names, read_events
from tutor.models import REPLY_LEASE_SECONDS, GuidedSession


def hold(guided: GuidedSession, holder: str, expires_in: float = REPLY_LEASE_SECONDS) -> None:
    """Record a lock as another request, in this or another process, would have taken it."""
    now = timezone.now()
    GuidedSession.objects.filter(pk=guided.pk).update(
        replying_since=now, reply_holder=holder, reply_expires=now + timedelta(seconds=expires_in)
    )


class ReplyLockTestCase(TutorTestCase):
    def test_a_lock_held_by_a_live_process_is_not_free(self) -> None:
        guided = self.start()
        hold(guided, processes.claim_name())  # another request of this very process

        response = self.say(guided, "Hello?")

        self.assertEqual(response.status_code, 409)
        self.assertIn("still busy", response.json()["error"])

    def test_a_lock_held_by_a_dead_process_is_free(self) -> None:
        guided = self.start()
        server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            hold(guided, f"{processes.process_name(server.pid)} 0123abcd")
            self.assertEqual(self.say(guided, "Hello?").status_code, 409)
        finally:
            server.kill()  # killed mid-reply
            server.wait()

        response = self.say(guided, "Still there?")

        self.assertEqual(response.status_code, 200)
        self.assertEqual(names(read_events(response))[-1], "done")
        guided.refresh_from_db()
        self.assertIsNone(guided.reply_expires)

    def test_a_recycled_process_id_does_not_hold_the_lock(self) -> None:
        guided = self.start()
        host, start, pid = processes.this_process().split(":")
        hold(guided, f"{host}:{int(start) - 1}:{pid} 0123abcd")  # an earlier process, same id

        self.assertTrue(guided.claim_reply())

    def test_a_lock_from_another_host_is_free_once_its_lease_runs_out(self) -> None:
        guided = self.start()
        hold(guided, "elsewhere/1:100:4242 0123abcd")
        self.assertFalse(guided.claim_reply())

        hold(guided, "elsewhere/1:100:4242 0123abcd", expires_in=-1)
        self.assertTrue(guided.claim_reply())

    def test_a_claim_renews_and_releases_only_its_own_lock(self) -> None:
        guided = self.start()
        self.assertTrue(guided.claim_reply())
        first_expiry = guided.reply_expires
        time.sleep(0.01)
        self.assertTrue(guided.renew_reply())
        guided.refresh_from_db()
        self.assertGreater(guided.reply_expires, first_expiry)

        # Its lease ran out and another request took the lock: the first can neither
        # renew nor release it.
        hold(guided, "elsewhere/1:100:4242 0123abcd")
        self.assertFalse(guided.renew_reply())
        guided.release_reply()
        taken = GuidedSession.objects.get(pk=guided.pk)
        self.assertEqual(taken.reply_holder, "elsewhere/1:100:4242 0123abcd")

    def test_a_reply_stops_its_heartbeat_when_it_ends(self) -> None:
        guided = self.start()
        read_events(self.say(guided, "Hi"))
        give_up = time.monotonic() + 5
        while any(t.name == "heartbeat" for t in threading.enumerate()):
            self.assertLess(time.monotonic(), give_up, "a heartbeat outlived its reply")
            time.sleep(0.01)
        guided.refresh_from_db()
        self.assertEqual((guided.reply_holder, guided.reply_expires), ("", None))


class HeartbeatTestCase(TutorRunTestCase):
    def test_a_heartbeat_keeps_the_lease_of_a_reply_being_written(self) -> None:
        guided = self.start()
        self.assertTrue(guided.claim_reply())
        GuidedSession.objects.filter(pk=guided.pk).update(reply_expires=timezone.now())

        heartbeat = processes.Heartbeat(guided.renew_reply, 0.05, for_at_most=10).start()
        time.sleep(0.3)
        heartbeat.stop()

        renewed = GuidedSession.objects.get(pk=guided.pk).reply_expires
        self.assertGreater(renewed, timezone.now() + timedelta(seconds=REPLY_LEASE_SECONDS - 5))
        self.assertFalse(GuidedSession.objects.get(pk=guided.pk).claim_reply())
