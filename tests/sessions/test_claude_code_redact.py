"""Secrets and home-directory names never reach the database (unless asked)."""

from __future__ import annotations

import json

from django.apps import apps
from django.db import models
from django.urls import reverse

from sessions.importers.redact import Scrubber
from sessions.models import Turn
from sessions.programs import KernelVersion
from tests.sessions.importing import MATMUL, ImportingTestCase, tiny
from tests.sessions.transcripts.build import ANTHROPIC_KEY, GITHUB_TOKEN, SECRETS, text, tool_use

ADD = "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) id: vec3<u32>) {}\n"


def every_stored_string() -> list[tuple[str, str]]:
    """(where, text) for every text and JSON field of every row of every model."""
    found = []
    for model in apps.get_models():
        fields = [
            f
            for f in model._meta.concrete_fields
            if isinstance(f, models.CharField | models.TextField | models.JSONField)
        ]
        if not fields:
            continue
        for row in model._default_manager.all():
            for field in fields:
                value = getattr(row, field.attname)
                if value is None:
                    continue
                if not isinstance(value, str):
                    value = json.dumps(value, ensure_ascii=False)
                found.append((f"{model.__name__}.{field.name} #{row.pk}", value))
    return found


class RedactionTestCase(ImportingTestCase):
    def assert_nothing_secret_stored(self) -> None:
        for where, value in every_stored_string():
            for secret in SECRETS:
                self.assertNotIn(secret, value, f"{secret!r} is stored in {where}")

    def test_nothing_secret_remains_anywhere(self) -> None:
        out = self.run_import(MATMUL)
        self.assert_nothing_secret_stored()
        self.assertIn(
            "Redacted: 1 anthropic-key, 2 aws-access-key, 2 aws-secret-key, 1 bearer-token, "
            "2 env-secret, 57 home-path, 2 private-key, 1 url-password.",
            out,
        )
        # What is left says what was there.
        prompt = Turn.objects.get(number=3).content
        self.assertIn("mine is [REDACTED:anthropic-key], in case", prompt)
        bash = Turn.objects.get(meta__tool="Bash").content
        self.assertIn('Authorization: Bearer [REDACTED:bearer-token]"', bash)
        self.assertIn("[REDACTED:private-key]", bash)
        self.assertIn(
            "postgres://kb:[REDACTED:url-password]@db.internal", Turn.objects.get(number=11).content
        )
        self.assertIn(
            "/home/<user>/wgsl-tutor/kernels/matmul.wgsl",
            json.dumps(KernelVersion.objects.last().meta),
        )

    def test_no_redact_keeps_everything(self) -> None:
        out = self.run_import(MATMUL, "--no-redact")
        self.assertIn("Redaction was off.", out)
        self.assertIn(ANTHROPIC_KEY, Turn.objects.get(number=3).content)
        self.assertIn("/home/alice/wgsl-tutor", KernelVersion.objects.last().meta["file_path"])

    def test_kernel_sources_are_redacted_and_edits_still_apply(self) -> None:
        path = "/Users/bob/proj/k.wgsl"
        source = f"// token {GITHUB_TOKEN} from /Users/bob/.config\n{ADD}"
        t = tiny()
        t.assistant(
            "msg_R1", [tool_use("toolu_R1", "Write", file_path=path, content=source)], "tool_use"
        )
        t.result("toolu_R1", f"File created successfully at: {path}")
        t.assistant(
            "msg_R2",
            [
                text("Drop that comment."),
                tool_use(
                    "toolu_R2",
                    "Edit",
                    file_path=path,
                    old_string=f"// token {GITHUB_TOKEN} from /Users/bob/.config\n",
                    new_string="",
                ),
            ],
            "tool_use",
        )
        t.result("toolu_R2", f"The file {path} has been updated.")
        self.run_import(self.write("t.jsonl", t))
        first, second = KernelVersion.objects.order_by("number")
        self.assertEqual(
            first.source, f"// token [REDACTED:github-token] from /Users/<user>/.config\n{ADD}"
        )
        self.assertEqual(second.source, ADD)
        self.assertEqual(second.meta["how"], "reconstructed")
        self.assertEqual(first.meta["file_path"], "/Users/<user>/proj/k.wgsl")
        self.assertNotIn("bob", json.dumps([v for _, v in every_stored_string() if "Turn" in _]))

    def test_kernelbin_exports_are_redacted_on_import_too(self) -> None:
        self.run_import(MATMUL, "--no-redact", "--visibility", "public")
        data = self.client.get("/s/matmul-the-dispatch-and-bounds-bugs/export.json").content
        self.assertIn(ANTHROPIC_KEY.encode(), data)
        out = self.run_import(self.write("copy.json", data.decode()), "--slug", "copy")
        self.assertIn("Redacted: 1 anthropic-key", out)
        copy = Turn.objects.get(session__slug="copy", number=3)
        self.assertNotIn(ANTHROPIC_KEY, copy.content)


class ScrubberTestCase(ImportingTestCase):
    def test_each_kind(self) -> None:
        cases = {
            "key sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz012345 end": "key [REDACTED:anthropic-key] end",
            "sk-proj-abcdefghijklmnopqrstuvwxyz123456": "[REDACTED:openai-key]",
            "export OPENAI_API_KEY=sk-abcdefghijklmnopqrstu1234": "export OPENAI_API_KEY=[REDACTED:env-secret]",
            "id AKIAIOSFODNN7EXAMPLE.": "id [REDACTED:aws-access-key].",
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY": "aws_secret_access_key = [REDACTED:aws-secret-key]",
            "gho_abcdefghijklmnopqrstuvwxyz0123456789": "[REDACTED:github-token]",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz": "[REDACTED:github-token]",
            "Authorization: Bearer abcdefghijklmnop.qrstuvwxyz": "Authorization: Bearer [REDACTED:bearer-token]",
            "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\nafter": "[REDACTED:private-key]\nafter",
            "-----BEGIN RSA PRIVATE KEY-----\ncut off": "[REDACTED:private-key]",
            "mysql://root:s3cr3t@localhost/db": "mysql://root:[REDACTED:url-password]@localhost/db",
            'API_TOKEN: "abcd12345678"': 'API_TOKEN: "[REDACTED:env-secret]"',
            "STRIPE_SECRET='sk_live_abcdefghij'": "STRIPE_SECRET='[REDACTED:env-secret]'",
            "cd /home/alice/x && ls /Users/bob": "cd /home/<user>/x && ls /Users/<user>",
            "C:\\Users\\carol\\proj": "C:\\Users\\<user>\\proj",
            "~/.claude/projects/-home-alice-wgsl/x.jsonl": "~/.claude/projects/-home-user-wgsl/x.jsonl",
        }
        for given, expected in cases.items():
            with self.subTest(given=given):
                self.assertEqual(Scrubber().text(given), expected)

    def test_what_is_not_a_secret_stays(self) -> None:
        for given in (
            'SECRET_KEY = os.getenv("SECRET_KEY")',
            "GITHUB_TOKEN=$GH_TOKEN",
            "/Users/Shared/data and /srv/home/web",
            "@group(0) @binding(0) var<storage, read> task_key: array<u32>;",
            "sk-short",
            "my-home-page-design",
        ):
            with self.subTest(given=given):
                self.assertEqual(Scrubber().text(given), given)

    def test_bad_characters_are_replaced_even_without_redaction(self) -> None:
        scrubber = Scrubber(redact=False)
        self.assertEqual(
            scrubber.value({"a\ud800": ["x\x00y", "\udfff"]}), {"a\ufffd": ["x\ufffdy", "\ufffd"]}
        )
        self.assertEqual(scrubber.text("🙂 stays"), "🙂 stays")


# Fake tokens of the families a hand list used to miss, shaped like the real thing.
MORE_TOKENS = {
    "slack-token": "xoxb-2048213591-7103519267843-Zq8vN2xLr5TfW9kPjH3mYc7B",
    "stripe-key": "sk_live_51HqZ8vN2xLr5TfW9kPjH3mYc7BdG4sA1eU6o",
    "google-api-key": "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    "gitlab-token": "glpat-xV3kq9ZmT2bWn8Lr4YcP",
    # Real ones mix letters and digits (hf_ and 34 of them).
    "huggingface-token": "hf_kQzVb7nXyLp3rMcJdH9GfAeUi0oPaSdFgH",
    "slack-app-token": "xapp-1-A07QZ8VN2XL-7103519267843-5f2b9c1d3e4a",
    "stripe-webhook-secret": "whsec_Zq8vN2xLr5TfW9kPjH3mYc7BdG4sA1eU",
    "google-oauth-secret": "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",
    "groq-key": "gsk_Zq8vN2xLr5TfW9kPjH3mYc7BdG4sA1eU6oIyRtXwQvLpKz0aBcDeFg",
    "replicate-token": "r8_Zq8vN2xLr5TfW9kPjH3mYc7BdG4sA1eU6oIyR",
    "databricks-token": "dapi0123456789abcdef0123456789abcdef",
    "shopify-token": "shpat_0123456789abcdef0123456789abcdef",
    "linear-key": "lin_api_Zq8vN2xLr5TfW9kPjH3mYc7BdG4sA1eU6oIyRtXw",
    "notion-token": "ntn_Zq8vN2xLr5TfW9kPjH3mYc7BdG4sA1eU6oIyRtXwQvLp",
    "twilio-key": "SK0123456789abcdef0123456789abcdef",
    "discord-webhook": "https://discord.com/api/webhooks/123456789012345678/Zq8vN2xLr5TfW9kPjH3mYc7BdG4sA1eU",
    "telegram-bot-token": "7123456789:AAHZq8vN2xLr5TfW9kPjH3mYc7BdG4sA1eU",
    "npm-token": "npm_q8Zr2Vb7Wm4Xn1Pc9Tl5Ys3Ud6Ae0Hf2Gj8x",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzdHVkZW50In0.Zq8vN2xLr5TfW9kPjH3mYc7BdG4",
}
GIT_LOG = (
    "commit 3f2a9c1\nAuthor: Alice Liddell <alice.liddell@wonderland.edu>\n\n"
    "    Fix the dispatch size\n\n    Co-Authored-By: Claude <noreply@anthropic.com>\n"
    "remote: git@github.com:alice/wgsl-tutor.git, docs: admin@example.com"
)


class MoreFamiliesTestCase(RedactionTestCase):
    def test_token_families_and_e_mail_addresses_are_redacted(self) -> None:
        t = tiny()
        listing = "\n".join(f"{kind}: {token}" for kind, token in MORE_TOKENS.items())
        t.assistant("msg_M1", [tool_use("toolu_M1", "Bash", command="git log -1")], "tool_use")
        t.result("toolu_M1", GIT_LOG, {"stdout": GIT_LOG, "stderr": "", "interrupted": False})
        t.user(f"Here is what my notes file holds:\n{listing}")
        out = self.run_import(self.write("leaky.jsonl", t))
        stored = "\n".join(value for _, value in every_stored_string())
        for kind, token in MORE_TOKENS.items():
            with self.subTest(kind=kind):
                self.assertNotIn(token, stored)
                self.assertIn(f"{kind}: [REDACTED:{kind}]", stored)
        self.assertNotIn("alice.liddell@wonderland.edu", stored)
        self.assertIn("Alice Liddell <[REDACTED:email]>", stored)
        # Not a person's address: the co-author line, a git remote, documentation.
        self.assertIn("noreply@anthropic.com", stored)
        self.assertIn("git@github.com:alice", stored)
        self.assertIn("admin@example.com", stored)
        self.assertIn("2 email", out.split("Redacted:")[1].splitlines()[0])


# A database password, as one session wrote it in many syntaxes.
PASSWORD = "Pg7!vZq2xLr9"


class LearnedSecretsTestCase(RedactionTestCase):
    def test_a_password_is_redacted_everywhere_whatever_the_syntax(self) -> None:
        t = tiny()
        # Said before anything shows it is a password: only learning it finds it here.
        t.user(f"It fails with {PASSWORD} as the password, why?")
        compose = f"services:\n  db:\n    environment:\n      - PASSWORD={PASSWORD}\n"
        t.assistant(
            "msg_P1", [tool_use("toolu_P1", "Read", file_path="/srv/compose.yml")], "tool_use"
        )
        t.result("toolu_P1", compose)
        powershell = f'$env:PGPASSWORD="{PASSWORD}"; psql -h db -U app'
        t.assistant("msg_P2", [tool_use("toolu_P2", "PowerShell", command=powershell)], "tool_use")
        t.result("toolu_P2", f"psql: connecting with {PASSWORD} failed")
        t.assistant(
            "msg_P3",
            [
                text(
                    f'In YAML:\n\n    password: {PASSWORD}\n\nand JSON {{"password": "{PASSWORD}"}}'
                )
            ],
        )
        out = self.run_import(self.write("password.jsonl", t))
        stored = every_stored_string()
        self.assertTrue(stored)
        for where, value in stored:
            self.assertNotIn(PASSWORD, value, where)
        contents = "\n".join(turn.content for turn in Turn.objects.all())
        for shown in (
            "- PASSWORD=[REDACTED:password]",
            '$env:PGPASSWORD=\\"[REDACTED:password]\\"',
            "password: [REDACTED:password]",
            "It fails with [REDACTED:password] as the password",
            "connecting with [REDACTED:password] failed",
        ):
            self.assertIn(
                shown, contents.replace('"', '\\"') if "PGPASSWORD" in shown else contents
            )
        self.assertIn("password", out.split("Redacted:")[1].splitlines()[0])
        session = Turn.objects.first().session
        session.publish()
        for name in ("sessions:export_json", "sessions:export_md", "sessions:detail"):
            body = self.client.get(reverse(name, args=[session.slug])).content.decode()
            self.assertNotIn(PASSWORD, body, name)

    def test_what_only_looks_like_a_password_stays(self) -> None:
        for given in (
            "password: str",
            "password = os.environ['DB_PASSWORD']",
            "def login(password: string) -> None",
            "password_hash = hash(pw)",
            "Enter the password: required",
            "PASSWORD_FILE=/run/secrets/db",
            "password: changeme123",
        ):
            with self.subTest(given=given):
                scrubber = Scrubber()
                self.assertEqual(scrubber.text(given), given)
                self.assertEqual(scrubber.known, {})

    def test_image_data_is_not_scanned(self) -> None:
        # Base64 that happens to hold an AWS key's shape: scanned, it would be changed.
        blob = ("AKIAZ7QX4MPLT3VNR2KD" + "A" * 60) * 200
        image = {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": blob},
        }
        scrubber = Scrubber()
        scrubber.learn(image)
        self.assertEqual(scrubber.value(image), image)
        self.assertEqual(scrubber.counts, {})
        self.assertEqual(scrubber.text("AKIAZ7QX4MPLT3VNR2KD"), "[REDACTED:aws-access-key]")


class EmailTestCase(ImportingTestCase):
    def test_what_looks_like_an_address_but_is_not(self) -> None:
        for given in (
            "@compute @workgroup_size(64)",
            "npm i lodash@4.17.21",
            "user@localhost",
            "a@b",
            "ping @alice in the chat",
        ):
            with self.subTest(given=given):
                self.assertEqual(Scrubber().text(given), given)

    def test_addresses_in_text(self) -> None:
        self.assertEqual(
            Scrubber().text("mail bob.smith+gpu@mail.co.uk."), "mail [REDACTED:email]."
        )
