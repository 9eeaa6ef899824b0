"""Fork ids: 130 bits of the content's hash for new forks, the 12 characters of older
ones still open, and an edit whose id is taken by another never lands on its page."""

from __future__ import annotations

from unittest import mock

import pytest
from django.core.cache import cache
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import TransactionTestCase

from kernels.models import Fork
from tests.base import add_kernel, make_session
from tests.kernels.test_fork import SWAPPED, WRONG
from tests.kernels.test_replay_views import finished

pytestmark = pytest.mark.usefixtures("fresh_replay_backend")


class ForkIdTests(TransactionTestCase):
    def setUp(self) -> None:
        cache.clear()  # rate limit counters
        self.session = make_session("demo", turns=4)
        self.version = add_kernel(self.session, turn=2)

    def fork(self, source: str) -> str:
        r = self.client.post("/s/demo/turns/2/fork/", {"source": source})
        self.assertEqual(r.status_code, 303, r.content[:300])
        return r["Location"]

    def test_a_fork_made_before_ids_grew_keeps_its_twelve_characters_and_its_urls(self) -> None:
        old = Fork.objects.create(id="abcdefgh2345", version=self.version, source=SWAPPED)
        self.assertEqual(old.get_absolute_url(), "/f/abcdefgh2345/")
        self.assertContains(self.client.get("/f/abcdefgh2345/"), "b[id.x] + a[id.x]")
        self.assertEqual(finished(self.client, "/f/abcdefgh2345/replay.json")["state"], "done")
        self.assertEqual(self.client.get("/f/abcdefgh2345/embed/").status_code, 200)

    def test_an_edit_whose_short_id_is_taken_by_another_gets_the_whole_hash(self) -> None:
        real = Fork.addresses

        def colliding(version_id, source, host_program, harness_digest):
            whole = real(version_id, source, host_program, harness_digest)[1]
            return "collidingcollidingcollidin", whole  # every edit's first choice is one id

        with mock.patch.object(Fork, "addresses", staticmethod(colliding)):
            first = self.fork(SWAPPED)
            second = self.fork(WRONG)
            again = self.fork(WRONG)

        self.assertEqual(first, "/f/collidingcollidingcollidin/")
        self.assertRegex(second, r"^/f/[a-z2-7]{52}/$")
        self.assertEqual(again, second)  # the same edit keeps its one address
        self.assertContains(self.client.get(second), "a[id.x] - b[id.x]")
        self.assertNotContains(self.client.get(second), "b[id.x] + a[id.x]")
        self.assertContains(self.client.get(first), "b[id.x] + a[id.x]")


class ForkIdMigrationTests(TransactionTestCase):
    def test_the_migration_keeps_the_forks_made_with_short_ids(self) -> None:
        executor = MigrationExecutor(connection)
        # The models as the database now holds them: other apps' later migrations stay.
        old_apps = executor.migrate([("kernels", "0008_run_by_job")]).apps
        session = old_apps.get_model("tutoring_sessions", "Session").objects.create(
            slug="demo", title="Demo", visibility="public"
        )
        kernel = old_apps.get_model("kernels", "Kernel").objects.create(session=session, name="k")
        version = old_apps.get_model("kernels", "KernelVersion").objects.create(
            kernel=kernel, number=1, source="x"
        )
        old_apps.get_model("kernels", "Fork").objects.create(
            id="abcdefgh2345", version=version, source="y"
        )

        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())

        fork = Fork.objects.get()
        self.assertEqual((fork.id, fork.source, fork.version.source), ("abcdefgh2345", "y", "x"))
