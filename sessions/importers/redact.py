"""Secrets, e-mail addresses and personal paths out of imported data, before anything is
stored.

Transcripts carry whatever passed through the learner's terminal: API keys pasted into
a prompt, a `.env` file a tool read, the user name in every absolute path. The importer
runs every string of every line it uses through `Scrubber.text()` (tool inputs and
results, `toolUseResult`, metadata, kernel sources), so nothing downstream can leak what
was removed here. The same pass replaces lone UTF-16 surrogates and NUL characters,
which no database text column accepts; that part runs even when redaction is off.

Replacements are deterministic ("[REDACTED:github-token]"), so an Edit's old_string and
the file it applies to are changed alike and the edit still applies.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

# One alternation, so each string is scanned once. Order matters where patterns overlap:
# private key blocks first, Anthropic before the generic sk- form.
#
# The token families and their shapes follow the maintained secret-scanning rule sets
# (gitleaks, detect-secrets); their patterns are not taken as they are, because several
# backtrack (nested quantifiers, `.+` before a literal). Every pattern here is linear in
# its input: it begins with a literal or a lookbehind that lets an attempt start only at
# the start of a run; no quantifier holds another, nor an alternation whose branches can
# begin alike; runs that a literal follows are possessive or cannot contain that literal.
# tests/sessions/test_claude_code_redact.py checks all three and feeds growing hostile
# inputs.
_PATTERNS: list[tuple[str, str]] = [
    (
        "private-key",
        # The whole block, or to the end when it is cut off: the first BEGIN consumes
        # the rest of the text, so no later attempt rescans it.
        r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----"
        r"(?:.*?-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----|.*\Z)",
    ),
    ("anthropic-key", r"\bsk-ant-[A-Za-z0-9_\-]{16,}+"),
    ("openai-key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}+"),
    ("github-token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}+|github_pat_[A-Za-z0-9_]{30,}+)"),
    (
        "gitlab-token",
        r"\bgl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-[A-Za-z0-9_\-]{20,}+",
    ),
    ("slack-token", r"\bxox[abposr]-[A-Za-z0-9\-]{10,}+"),
    ("slack-webhook", r"https://hooks\.slack\.com/services/[A-Za-z0-9_/]{20,}+"),
    ("stripe-key", r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}+"),
    ("google-api-key", r"\bAIza[0-9A-Za-z_\-]{35}"),
    # Letters and digits: the shape of real tokens (hf_ followed by 34 of them).
    ("huggingface-token", r"\bhf_[A-Za-z0-9]{30,}+"),
    ("slack-app-token", r"\bxapp-[0-9]-[A-Za-z0-9\-]{20,}+"),
    ("stripe-webhook-secret", r"\bwhsec_[A-Za-z0-9]{24,}+"),
    ("google-oauth-secret", r"\bGOCSPX-[A-Za-z0-9_\-]{20,}+"),
    ("groq-key", r"\bgsk_[A-Za-z0-9]{40,}+"),
    ("replicate-token", r"\br8_[A-Za-z0-9]{30,}+"),
    ("databricks-token", r"\bdapi[a-f0-9]{32}\b"),
    ("shopify-token", r"\bshp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}\b"),
    ("linear-key", r"\blin_api_[A-Za-z0-9]{32,}+"),
    ("notion-token", r"\bntn_[A-Za-z0-9]{40,}+"),
    ("twilio-key", r"\bSK[0-9a-f]{32}\b"),
    (
        "discord-webhook",
        r"https://(?:canary\.|ptb\.)?discord(?:app)?\.com/api/webhooks/[0-9]{5,30}+/[A-Za-z0-9_\-]{20,}+",
    ),
    ("telegram-bot-token", r"(?<![0-9])[0-9]{8,10}:AA[A-Za-z0-9_\-]{33}(?![A-Za-z0-9_\-])"),
    ("npm-token", r"\bnpm_[A-Za-z0-9]{36}"),
    ("pypi-token", r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,}+"),
    ("sendgrid-key", r"\bSG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}"),
    ("digitalocean-token", r"\bdo[opr]_v1_[a-f0-9]{64}"),
    ("age-secret-key", r"\bAGE-SECRET-KEY-1[0-9A-Z]{50,}+"),
    ("jwt", r"\beyJ[A-Za-z0-9_\-]{8,}+\.eyJ[A-Za-z0-9_\-]{8,}+\.[A-Za-z0-9_\-]*+"),
    ("aws-access-key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    (
        "aws-secret-key",
        r"(?i:aws_secret_access_key|secret_access_key|aws_secret)"
        r"[\"']?\s*+[:=]\s*+[\"']?(?P<aws>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])",
    ),
    ("bearer-token", r"(?i:\bbearer)\s++(?P<bearer>[A-Za-z0-9\-._~+/]{12,}+=*+)"),
    (
        "url-password",
        r"(?<![a-zA-Z0-9+.\-])(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*+://)"
        r"(?P<user>[^\s:/@\"'`]++):(?P<pw>[^\s@/\"'`]++)@",
    ),
    (
        "password",
        # password: …, $env:PGPASSWORD="…", "db_password": "…", Password=…; (connection
        # strings), client_secret = '…': whatever the syntax, the value after the name.
        # Only a value that looks like a secret is taken (see _looks_secret): not
        # `password: str` nor `password = os.environ[…]`.
        r"(?i:passw(?:or)?d|\bpwd|passphrase|client[_\-]?secret|secret[_\-]?key|api[_\-]?key"
        r"|access[_\-]?key|auth[_\-]?token|access[_\-]?token|accountkey|secret)"
        r"[\"']?\s{0,3}+(?::=|=>|[:=])\s{0,3}+[\"']?"
        r"(?P<pwval>[^\s\"'`$<>{}\[\](),;]{6,200}+)",
    ),
    (
        "env-secret",
        # FOO_TOKEN=…, API_KEY: "…", DB_PASSWORD='…' (the names, not the values, stay).
        r"\b(?P<name>[A-Z][A-Z0-9_]*_(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD)S?)\b[\"']?"
        r"\s*+[:=]\s*+(?P<q>[\"']?)(?P<val>[^\s\"'`$<\[(){},;][^\s\"'`(){},;]{5,}?)"
        r"(?=(?P=q)(?:[\s\"'`,;)}\]]|\Z))",
    ),
    (
        "home-path",
        r"(?P<home>(?<![\w.])/home/|(?<![\w.])/Users/|\b[A-Za-z]:[\\/]++Users[\\/]++)"
        r"(?P<who>[A-Za-z0-9._\-]++)(?=[\\/\s\"'`:;,)\]]|\Z)",
    ),
    # Claude Code's encoded project folders: ~/.claude/projects/-home-alice-proj
    (
        "home-path",
        r"(?<=projects/)(?P<enc>-home-|-Users-|[A-Za-z]--Users-)(?P<encwho>[A-Za-z0-9._]++)(?=-)",
    ),
]
# The newer token families, each rarely met, and the password family (whose names are
# looked for in any case) are scanned apart, only where their needles are: one
# alternation of everything took three times as long on every string (8 µs a character
# of code instead of 2.6).
_EXTRA_KINDS = {
    "slack-app-token", "stripe-webhook-secret", "google-oauth-secret", "groq-key",
    "replicate-token", "databricks-token", "shopify-token", "linear-key", "notion-token",
    "twilio-key", "discord-webhook", "telegram-bot-token",
}  # fmt: skip
_EXTRA_NEEDLES = (
    "xapp-", "whsec_", "GOCSPX-", "gsk_", "r8_", "dapi", "shp", "lin_api_", "ntn_", "SK",
    "discord", ":AA",
)  # fmt: skip


def _scan_of(kinds: Callable[[str], bool]) -> re.Pattern[str]:
    """One alternation of the patterns whose kind is chosen; each group named k<index>."""
    return re.compile(
        "|".join(
            f"(?P<k{n}>{pattern})" for n, (kind, pattern) in enumerate(_PATTERNS) if kinds(kind)
        ),
        re.S,
    )


_SCAN = _scan_of(lambda kind: kind not in _EXTRA_KINDS and kind != "password")
_EXTRA_SCAN = _scan_of(lambda kind: kind in _EXTRA_KINDS)
_PASSWORD_SCAN = _scan_of(lambda kind: kind == "password")
_KINDS = {f"k{n}": kind for n, (kind, _) in enumerate(_PATTERNS)}
# Not people: macOS's shared folders.
_NOT_USERS = {"Shared", "Public", "Guest", "Default", "user"}
# Where only part of a match is the secret, the group that holds it.
_SECRET_GROUP = {
    "aws-secret-key": "aws",
    "bearer-token": "bearer",
    "url-password": "pw",
    "env-secret": "val",
    "password": "pwval",
}
# Values a password-like assignment holds that are not secrets: placeholders.
_PLACEHOLDERS = ("xxxx", "****", "...", "changeme", "redacted", "example", "placeholder")
# Secrets learned this many at most per import (each is looked for in every string).
KNOWN_MAX = 100

# Every pattern above needs one of these substrings. Looking for them first (one cheap
# search) lets most strings skip the full scan, which is the slow part of an import.
_NEEDLES = (
    "sk-",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "gldt-",
    "glft-",
    "glsoat-",
    "glrt-",
    "glcbt-",
    "glimt-",
    "glptt-",
    "glagent-",
    "gloas-",
    "xox",
    "k_live_",
    "k_test_",
    "AIza",
    "hf_",
    "npm_",
    "pypi-",
    "SG.",
    "_v1_",
    "AGE-SECRET",
    "eyJ",
    "AKIA",
    "ASIA",
    "ecret",
    "ECRET",
    "earer",
    "EARER",
    "://",
    "PRIVATE KEY",
    "_KEY",
    "_TOKEN",
    "_SECRET",
    "_PASSW",
    "/home/",
    "Users",
    "projects/-",
)

_NEEDLE = re.compile("|".join(re.escape(needle) for needle in _NEEDLES))
_EXTRA_NEEDLE = re.compile("|".join(re.escape(needle) for needle in _EXTRA_NEEDLES))
# The same names, found by plain substring search in the lowered text: a regex that
# ignores case reads every character (0.45 µs each), str.find skips through.
_NAME_WORDS = (
    "passw", "pwd", "passphrase", "secret", "apikey", "api_key", "api-key", "accesskey",
    "access_key", "access-key", "accountkey", "authtoken", "auth_token", "auth-token",
    "accesstoken", "access_token", "access-token",
)  # fmt: skip
_ENV_WORDS = ("_KEY", "_TOKEN", "_SECRET", "_PASSW")


def _names_a_secret(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in _NAME_WORDS)


def _may_assign_a_secret(text: str) -> bool:
    """Whether the text may hold what Scrubber.learn looks for: a password-like name, an
    environment variable's (in capitals: "input_tokens" is no secret), or a URL with a
    password."""
    return (
        _names_a_secret(text)
        or any(word in text for word in _ENV_WORDS)
        or ("://" in text and "@" in text)
    )


# Most strings that hit a needle hit only a home directory's (every file path does): the
# home-path patterns alone scan them, five times faster than all of them.
_HOME_NEEDLES = ("/home/", "Users", "projects/-")
_SECRET_NEEDLE = re.compile(
    "|".join(re.escape(needle) for needle in _NEEDLES if needle not in _HOME_NEEDLES)
)
_HOME_SCAN = _scan_of(lambda kind: kind == "home-path")
# What a value once recognised as a secret is learned from (see Scrubber.learn).
_LEARNED_KINDS = ("url-password", "password", "env-secret")
_LEARN_SCAN = _scan_of(lambda kind: kind in _LEARNED_KINDS)
# Image data (base64): never scanned, it holds no text (Pillow re-encodes what is kept).
BLOB_CHARS = 4096
_BASE64 = re.compile(r"[A-Za-z0-9+/=\r\n]*+")
_BAD_CHARS = re.compile("[\ud800-\udfff\x00]")
# Strings this short that were found clean are remembered (see Scrubber.clean).
CLEAN_MEMO_CHARS = 64
CLEAN_MEMO_SIZE = 8192

# E-mail addresses (a git log's authors, a config's owner). The pattern starts at the
# "@" (a literal: the engine skips to each one) and needs a dot in the domain, so the
# "@compute" and "@group(0)" kernels are full of fail at once; the local part is then
# read backwards, bounded, and the domain checked in Python.
_EMAIL_AT = re.compile(r"@(?P<domain>[A-Za-z0-9\-]{1,63}+\.[A-Za-z0-9.\-]{1,255}+)")
_LOCAL_PART = re.compile(r"[\w.%+\-]{1,64}+\Z")
_LOCAL_CHAR = re.compile(r"[\w.%+\-]")
_NOT_PERSONAL_EMAILS = {"noreply@anthropic.com"}
_EXAMPLE_DOMAINS = {"example.com", "example.org", "example.net"}
_NOT_PERSONAL_LOCALS = {"git"}  # git@github.com:org/repo is a remote, not a person


def _looks_secret(value: str) -> bool:
    """Whether the value of a password-like assignment is a secret, not code or a
    placeholder: `hunter2`, `S3cr3t!` are; `str`, `os.environ`, `/run/secrets/db`,
    `changeme` are not. A word of letters alone is not taken (it reads as code)."""
    lowered = value.lower()
    if len(value) < 6 or value[0] in "/~." or any(p in lowered for p in _PLACEHOLDERS):
        return False
    if value.replace(".", "_").replace("-", "_").isidentifier():
        return any(c.isdigit() for c in value)
    return True


def is_blob(value: str) -> bool:
    """Base64 data too long to be anything but a file (an image, a PDF)."""
    return len(value) > BLOB_CHARS and _BASE64.fullmatch(value) is not None


def _clean_chars(text: str) -> str:
    # Lone surrogates (JSON "\ud800") cannot be encoded as UTF-8; NUL is refused by
    # PostgreSQL text columns. Both become U+FFFD, the standard replacement character.
    return _BAD_CHARS.sub("\ufffd", text)


def _is_personal(local: str, domain: str) -> bool:
    """Whether local@domain is a person's address (not a no-reply, an example, a remote)."""
    labels = domain.split(".")
    top = labels[-1]
    return (
        len(labels) >= 2
        and top.isascii()
        and top.isalpha()
        and len(top) >= 2
        and f"{local}@{domain}".lower() not in _NOT_PERSONAL_EMAILS
        and domain.lower() not in _EXAMPLE_DOMAINS
        and local not in _NOT_PERSONAL_LOCALS
    )


class Scrubber:
    """Cleans strings and JSON values, counting what it redacted by kind."""

    def __init__(self, redact: bool = True) -> None:
        self.redact = redact
        self.counts: Counter[str] = Counter()
        # JSON keys and short values ("type", "assistant", a model's name) repeat on every
        # line: those found clean are remembered, so that each is scanned once (90% of
        # the strings of a transcript).
        self.clean: set[str] = set()
        # Values recognised as secrets (a password assignment, a connection string's
        # password): redacted wherever else they appear, whatever the syntax around them.
        self.known: dict[str, str] = {}

    def _learn(self, kind: str, secret: str) -> None:
        if secret not in self.known and len(self.known) < KNOWN_MAX and _looks_secret(secret):
            self.known[secret] = kind
            self.clean.clear()  # a remembered clean string may hold it

    def learn_line(self, raw: str, value: Any) -> None:
        """learn() for a line of a file, looked at only when its text names a secret."""
        if self.redact and _may_assign_a_secret(raw):
            self.learn(value)

    def learn(self, value: Any) -> None:
        """Note the secrets assigned in a JSON value, without changing it. The importer
        reads every line through this first, so a secret is redacted even where it
        appears before (or without) the assignment that gives it away."""
        if not self.redact:
            return
        if isinstance(value, str):
            if _may_assign_a_secret(value) and not is_blob(value):
                for match in _LEARN_SCAN.finditer(value):
                    kind = _KINDS[cast(str, match.lastgroup)]
                    self._learn(kind, match[_SECRET_GROUP[kind]])
        elif isinstance(value, dict):
            for item in value.values():
                self.learn(item)
        elif isinstance(value, list):
            for item in value:
                self.learn(item)

    def _replace(self, match: re.Match[str]) -> str:
        # Each alternative of _SCAN is a named group: the one that matched is the kind.
        kind = _KINDS[cast(str, match.lastgroup)]
        whole: str = match.group(0)
        if kind == "home-path":
            prefix, who = (
                (match["home"], match["who"]) if match["home"] else (match["enc"], match["encwho"])
            )
            if who in _NOT_USERS:
                return whole
            self.counts[kind] += 1
            return f"{prefix}<user>" if match["home"] else f"{prefix}user"
        secret = _SECRET_GROUP.get(kind)
        if kind == "password" and not _looks_secret(match["pwval"]):
            return whole  # code (`password: str`), a placeholder, or redacted already
        self.counts[kind] += 1
        marker = f"[REDACTED:{kind}]"
        if secret is None:
            return marker
        if kind in _LEARNED_KINDS:
            self._learn(kind, match[secret])
        # Keep the label around the secret ("Bearer ", "DB_PASSWORD=", "postgres://app:").
        start, end = match.start(secret) - match.start(), match.end(secret) - match.start()
        return whole[:start] + marker + whole[end:]

    def _emails(self, text: str) -> str:
        parts, done = [], 0
        for match in _EMAIL_AT.finditer(text):
            at = match.start()
            if at <= done or not _LOCAL_CHAR.match(text, at - 1):
                continue
            local = _LOCAL_PART.search(text, max(done, at - 64), at)
            start = local.start() if local else at
            if (
                local is None
                or (start > done and _LOCAL_CHAR.match(text, start - 1))  # longer than 64
                or not _is_personal(local[0], match["domain"].rstrip(".-"))
            ):
                continue
            self.counts["email"] += 1
            parts += [text[done:start], "[REDACTED:email]"]
            done = at + 1 + len(match["domain"].rstrip(".-"))
        return "".join([*parts, text[done:]]) if parts else text

    def text(self, value: str) -> str:
        remember = len(value) <= CLEAN_MEMO_CHARS
        if remember and value in self.clean:
            return value
        original = value
        if _BAD_CHARS.search(value):
            value = _clean_chars(value)
        if self.redact:
            if _NEEDLE.search(value):
                scan = _SCAN if _SECRET_NEEDLE.search(value) else _HOME_SCAN
                value = scan.sub(self._replace, value)
            if _EXTRA_NEEDLE.search(value):
                value = _EXTRA_SCAN.sub(self._replace, value)
            # Last: a token or a home path in the value is named by its own kind first.
            if _names_a_secret(value):
                value = _PASSWORD_SCAN.sub(self._replace, value)
            if "@" in value:
                value = self._emails(value)
            for secret, kind in self.known.items():
                if secret in value:
                    self.counts[kind] += value.count(secret)
                    value = value.replace(secret, f"[REDACTED:{kind}]")
        if remember and value == original:
            if len(self.clean) >= CLEAN_MEMO_SIZE:
                self.clean.clear()
            self.clean.add(value)
        return value

    def value(self, value: Any) -> Any:
        """A JSON value with every string (keys included) cleaned; other values as they are."""
        if isinstance(value, str):
            return value if is_blob(value) else self.text(value)
        if isinstance(value, dict):
            return {self.text(key): self.value(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.value(item) for item in value]
        return value

    def summary(self) -> str:
        if not self.redact:
            return "Redaction was off."
        if not self.counts:
            return "Redacted: nothing found."
        parts = ", ".join(f"{count} {kind}" for kind, count in sorted(self.counts.items()))
        return f"Redacted: {parts}."
