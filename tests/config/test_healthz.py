from django.test import TestCase


class HealthzTestCase(TestCase):
    def test_it_reports_the_database_and_the_replay_backend(self) -> None:
        r = self.client.get("/healthz")
        self.assertEqual(r.status_code, 200)
        body = r.json()
        self.assertTrue(body["database"]["ok"])
        self.assertIn("replay", body)
        self.assertIn("backend", body["replay"])
        self.assertEqual(
            r["Cache-Control"], "max-age=0, no-cache, no-store, must-revalidate, private"
        )
