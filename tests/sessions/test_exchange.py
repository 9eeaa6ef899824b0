import json
from io import StringIO
from pathlib import Path

from django.conf import settings
from django.core.management import CommandError, call_command

from sessions.models import Session, Tag, Turn
from sessions.programs import Kernel, KernelVersion
from tests.base import ADD_SOURCE, BaseTestCase, add_kernel, make_session


def export(client, slug: str) -> dict:
    return json.loads(client.get(f"/s/{slug}/export.json").content)


class ExportTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.session = make_session("demo", turns=3, summary="Sum", learner="Sam")
        self.session.tags.add(Tag.objects.create(name="matmul", slug="matmul"))
        add_kernel(self.session, turn=2)

    def test_json_export_starts_with_the_documented_shape(self) -> None:
        r = self.client.get("/s/demo/export.json")
        self.assertEqual(r["Content-Type"], "application/json; charset=utf-8")
        doc = json.loads(r.content)
        self.assertEqual(list(doc)[:4], ["format", "session", "turns", "kernels"])
        self.assertEqual(doc["format"], "kernelbin/1")
        self.assertEqual(doc["session"]["slug"], "demo")
        self.assertEqual(doc["session"]["tags"], ["matmul"])
        self.assertEqual(doc["turns"][1]["kernel"], {"name": "add", "version": 1})
        self.assertEqual(doc["kernels"][0]["versions"][0]["turn"], 2)
        self.assertEqual(doc["kernels"][0]["versions"][0]["source"], ADD_SOURCE)

    def test_markdown_export_reads_like_the_session(self) -> None:
        r = self.client.get("/s/demo/export.md")
        self.assertEqual(r["Content-Type"], "text/markdown; charset=utf-8")
        text = r.content.decode()
        self.assertTrue(text.startswith("# Session demo\n"))
        self.assertIn("## Turn 2 · Tutor · kernel `add` v1", text)
        self.assertIn("```wgsl\n@group(0)", text)

    def test_markdown_fences_survive_backticks_in_sources(self) -> None:
        KernelVersion.objects.create(
            kernel=Kernel.objects.get(), number=2, source="// ```` tricky\n"
        )
        text = self.client.get("/s/demo/export.md").content.decode()
        self.assertIn("`````wgsl\n// ```` tricky\n`````", text)


class ImportTestCase(BaseTestCase):
    def write(self, tmp: Path, data, name: str = "session.json") -> Path:
        path = tmp / name
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        return path

    def import_file(self, path: Path, *args) -> str:
        out = StringIO()
        call_command("import_transcript", str(path), *args, stdout=out)
        return out.getvalue()

    def test_round_trip_is_lossless(self) -> None:
        session = make_session("demo", turns=4, summary="Sum", learner="Sam", tutor_model="m")
        version = add_kernel(session, turn=2)
        version.note, version.expected_status = "first try", "passed"
        version.save()
        Turn.objects.filter(session=session, number=3).update(meta={"tokens": 12, "model": "m"})
        before = export(self.client, "demo")
        self.client.logout()

        Session.objects.all().delete()
        self.assertEqual(Kernel.objects.count(), 0)
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            out = self.import_file(self.write(Path(tmp), before))
        self.assertIn("Created session 'demo': 4 turns, 1 kernel, 1 kernel version.", out)
        after = export(self.client, "demo")
        self.assertEqual(before, after)
        # Rendering happened on import.
        self.assertIn("<p>Turn 1 text</p>", Turn.objects.get(number=1).html)

    def test_importing_again_updates_instead_of_duplicating(self) -> None:
        session = make_session("demo", turns=2)
        data = export(self.client, "demo")
        data["session"]["title"] = "New title"
        data["turns"][0]["content"] = "Changed"
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            out = self.import_file(self.write(Path(tmp), data))
        self.assertIn("Updated session 'demo'", out)
        self.assertEqual(Session.objects.count(), 1)
        session = Session.objects.get(slug="demo")
        self.assertEqual(session.title, "New title")
        self.assertEqual(session.turns.get(number=1).content, "Changed")
        self.assertEqual(session.turns.count(), 2)

    def test_published_turns_cannot_be_dropped(self) -> None:
        make_session("demo", turns=3)
        data = export(self.client, "demo")
        data["turns"] = data["turns"][:2]
        import tempfile

        with tempfile.TemporaryDirectory() as tmp, self.assertRaisesMessage(CommandError, "frozen"):
            self.import_file(self.write(Path(tmp), data))
        self.assertEqual(Turn.objects.count(), 3)

    def test_bad_files_exit_with_a_message_and_write_nothing(self) -> None:
        good = {
            "format": "kernelbin/1",
            "session": {"slug": "x", "title": "X"},
            "turns": [{"number": 1, "role": "learner", "content": "hi"}],
            "kernels": [],
        }

        def variant(**changes):
            data = json.loads(json.dumps(good))
            for key, value in changes.items():
                target, _, field = key.partition("__")
                if field:
                    data[target][field] = value
                else:
                    data[target] = value
            return data

        bad_harness = {"buffers": {}, "passes": [], "bogus": 1}
        cases = [
            (
                "{ not json",
                "Not valid JSON: Expecting property name enclosed in double quotes at line 1, column 3",
            ),
            ("", "The file is empty"),
            ("[1, 2]", "must hold a JSON object"),
            (variant(format="kernelbin/2"), "Unknown format 'kernelbin/2'"),
            (variant(format=None), "Unknown format None"),
            (variant(session__title=None), "session.title: expected str, got NoneType"),
            ({k: v for k, v in good.items() if k != "turns"}, "file: the field 'turns' is missing"),
            (
                variant(turns=[{"number": 1, "role": "learner"}]),
                "turns[0]: the field 'content' is missing",
            ),
            (
                variant(turns=[{"number": 1, "role": "learner", "content": "a"}] * 2),
                "turns[1].number: turn 1 appears more than once",
            ),
            (
                variant(turns=[{"number": 0, "role": "learner", "content": "a"}]),
                "turn numbers start at 1",
            ),
            (
                variant(turns=[{"number": "1", "role": "learner", "content": "a"}]),
                "expected int, got str",
            ),
            (
                variant(turns=[{"number": True, "role": "learner", "content": "a"}]),
                "expected int, got bool",
            ),
            (
                variant(turns=[{"number": 1, "role": "wizard", "content": "a"}]),
                "'wizard' is not one of",
            ),
            (variant(session__slug="no spaces!"), "is not a valid slug"),
            (
                variant(
                    turns=[
                        {
                            "number": 1,
                            "role": "learner",
                            "content": "a",
                            "kernel": {"name": "k", "version": 1},
                        }
                    ]
                ),
                "refers to kernel 'k' version 1, which is not in the file",
            ),
            (
                variant(kernels=[{"name": "k", "harness": bad_harness, "versions": []}]),
                "kernels[0].harness:",
            ),
            (
                variant(
                    kernels=[{"name": "k", "versions": [{"number": 1, "source": "x", "turn": 5}]}]
                ),
                "there is no turn 5",
            ),
            (
                variant(files=[{"name": "w.bin", "data": "not base64!"}]),
                "files[0].data: not base64.",
            ),
            (
                variant(
                    files=[
                        {
                            "name": "w.bin",
                            "data": "AAAA" * (settings.SESSION_FILE_MAX_BYTES // 3 + 2),
                        }
                    ]
                ),
                "files[0].data: the file is over the limit of",
            ),
            (
                variant(contents=[{"sha256": "0" * 64, "data": "%%%%"}]),
                "contents[0].data: not base64.",
            ),
            (
                variant(
                    contents=[
                        {
                            "sha256": "0" * 64,
                            "data": "AAAA" * (settings.SESSION_FILE_MAX_BYTES // 3 + 2),
                        }
                    ]
                ),
                "contents[0].data: the file is over the limit of",
            ),
        ]
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            for index, (data, message) in enumerate(cases):
                with self.subTest(message=message):
                    path = self.write(Path(tmp), data, f"case{index}.json")
                    with self.assertRaises(CommandError) as caught:
                        self.import_file(path)
                    self.assertIn(message, str(caught.exception))
                    self.assertIn("Nothing was imported.", str(caught.exception))
                    self.assertEqual(Session.objects.count(), 0)
                    self.assertEqual(Turn.objects.count(), 0)

    def test_a_100_mb_file_is_refused_before_reading(self) -> None:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "huge.json"
            with path.open("wb") as handle:
                handle.truncate(100 * 1024 * 1024)
            with self.assertRaisesMessage(CommandError, "larger than the import limit"):
                self.import_file(path)
        self.assertEqual(Session.objects.count(), 0)

    def test_a_missing_file_says_so(self) -> None:
        with self.assertRaisesMessage(CommandError, "Cannot read /nonexistent/x.json"):
            self.import_file(Path("/nonexistent/x.json"))

    def test_options_override_the_file(self) -> None:
        make_session("demo", turns=1)
        data = export(self.client, "demo")
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            self.import_file(
                self.write(Path(tmp), data),
                "--slug",
                "copy",
                "--title",
                "Copy",
                "--visibility",
                "unlisted",
            )
        copy = Session.objects.get(slug="copy")
        self.assertEqual((copy.title, copy.visibility), ("Copy", "unlisted"))
