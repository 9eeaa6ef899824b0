"""What the person importing chose, the same for every format and every way in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from sessions.importers.project_files import ProjectFiles


@dataclass(frozen=True)
class ImportOptions:
    """None keeps what the file says (or, on a re-import, what the session has)."""

    title: str | None = None
    slug: str | None = None
    visibility: str | None = None
    # Secrets and home-directory names out of the file; characters no database column
    # accepts are replaced either way.
    redact: bool = True
    # A new session's owner.
    owner: User | None = None
    # The project's other files (weights, data), to add to the session's files.
    files: ProjectFiles | None = None
    # Told the number of turns written after each batch (an upload's page shows it).
    progress: Callable[[int], None] | None = None


DEFAULTS = ImportOptions()
