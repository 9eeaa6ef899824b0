from io import StringIO

from django.core.management import call_command
from django.test import TestCase

from sessions.models import Session, Turn
from sessions.programs import KernelVersion
from tests.base import make_session


class LoadShowcaseTestCase(TestCase):
    def load(self) -> str:
        out = StringIO()
        call_command("load_showcase", stdout=out)
        return out.getvalue()

    def test_it_loads_the_showcase_once_however_often_it_runs(self) -> None:
        self.assertIn("Created session 'gpu-inference-from-scratch'", self.load())
        counts = (Session.objects.count(), Turn.objects.count(), KernelVersion.objects.count())
        self.assertIn("Updated session 'gpu-inference-from-scratch'", self.load())
        self.assertEqual(
            (Session.objects.count(), Turn.objects.count(), KernelVersion.objects.count()), counts
        )
        session = Session.objects.get()
        self.assertEqual((session.source, session.visibility), ("fixture", "public"))
        self.assertGreaterEqual(session.turns.count(), 60)

    def test_showcase_sessions_no_longer_shipped_go_and_others_stay(self) -> None:
        make_session("old-showcase", source="fixture")
        make_session("someones-import", source="imported")
        self.assertIn("Removed session 'old-showcase'", self.load())
        self.assertEqual(
            set(Session.objects.values_list("slug", flat=True)),
            {"gpu-inference-from-scratch", "someones-import"},
        )

    def test_the_showcase_goes_through_kernelbin_1_like_any_session(self) -> None:
        import json
        import tempfile
        from pathlib import Path

        self.load()
        url = "/s/gpu-inference-from-scratch/export.json"
        exported = json.loads(self.client.get(url).content)
        Session.objects.all().delete()
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "showcase.json"
            path.write_text(json.dumps(exported))
            call_command("import_transcript", str(path), stdout=StringIO())
        again = json.loads(self.client.get(url).content)
        self.assertEqual(again, exported)
        self.assertEqual(len(exported["turns"]), Turn.objects.count())
        self.assertEqual(KernelVersion.objects.filter(expected_status="").count(), 0)
