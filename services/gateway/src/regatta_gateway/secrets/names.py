"""What a secret may be called: the names the store keeps and a run's config refers to."""

from __future__ import annotations

import re

SECRET_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
