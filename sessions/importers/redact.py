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
    ("huggingface-token", r"\bhf_[A-Za-z]{30,}+"),
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
_SCAN = re.compile(
    "|".join(f"(?P<k{n}>{pattern})" for n, (_, pattern) in enumerate(_PATTERNS)), re.S
)
_KINDS = {f"k{n}": kind for n, (kind, _) in enumerate(_PATTERNS)}
# Not people: macOS's shared folders.
_NOT_USERS = {"Shared", "Public", "Guest", "Default", "user"}
# Where only part of a match is the secret, the group that holds it.
_SECRET_GROUP = {
    "aws-secret-key": "aws",
    "bearer-token": "bearer",
    "url-password": "pw",
    "env-secret": "val",
}

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
_BAD_CHARS = re.compile("[\ud800-\udfff\x00]")

# E-mail addresses (a git log's authors, a config's owner). An attempt starts only where
# an address could (the lookbehind), its parts are bounded, and the domain is checked in
# Python rather than by a backtracking pattern.
_EMAIL = re.compile(r"(?<![\w.%+\-])(?P<local>[\w.%+\-]{1,64}+)@(?P<domain>[A-Za-z0-9.\-]{1,255}+)")
_NOT_PERSONAL_EMAILS = {"noreply@anthropic.com"}
_EXAMPLE_DOMAINS = {"example.com", "example.org", "example.net"}
_NOT_PERSONAL_LOCALS = {"git"}  # git@github.com:org/repo is a remote, not a person


def _clean_chars(text: str) -> str:
    # Lone surrogates (JSON "\ud800") cannot be encoded as UTF-8; NUL is refused by
    # PostgreSQL text columns. Both become U+FFFD, the standard replacement character.
    return _BAD_CHARS.sub("\ufffd", text)


class Scrubber:
    """Cleans strings and JSON values, counting what it redacted by kind."""

    def __init__(self, redact: bool = True) -> None:
        self.redact = redact
        self.counts: Counter[str] = Counter()

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
        self.counts[kind] += 1
        marker = f"[REDACTED:{kind}]"
        secret = _SECRET_GROUP.get(kind)
        if secret is None:
            return marker
        # Keep the label around the secret ("Bearer ", "DB_PASSWORD=", "postgres://app:").
        start, end = match.start(secret) - match.start(), match.end(secret) - match.start()
        return whole[:start] + marker + whole[end:]

    def _email(self, match: re.Match[str]) -> str:
        domain = match["domain"].rstrip(".-")
        labels = domain.split(".")
        address = f"{match['local']}@{domain}"
        if (
            len(labels) < 2
            or not (labels[-1].isascii() and labels[-1].isalpha() and len(labels[-1]) >= 2)
            or address.lower() in _NOT_PERSONAL_EMAILS
            or domain.lower() in _EXAMPLE_DOMAINS
            or match["local"] in _NOT_PERSONAL_LOCALS
        ):
            return match[0]
        self.counts["email"] += 1
        return "[REDACTED:email]" + match[0][len(address) :]

    def text(self, value: str) -> str:
        if _BAD_CHARS.search(value):
            value = _clean_chars(value)
        if self.redact:
            if _NEEDLE.search(value):
                value = _SCAN.sub(self._replace, value)
            if "@" in value:
                value = _EMAIL.sub(self._email, value)
        return value

    def value(self, value: Any) -> Any:
        """A JSON value with every string (keys included) cleaned; other values as they are."""
        if isinstance(value, str):
            return self.text(value)
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
