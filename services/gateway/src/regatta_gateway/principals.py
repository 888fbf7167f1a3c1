"""Who acts: a principal (the user a bearer token names) and the scope of a request (that principal in
one workspace, with their role there). Tokens are stored only as SHA-256 hashes.

The service layer takes a Scope or Principal; authentication.py makes them from a bearer token and a
workspace name (which the routes read from the request's headers).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    user_id: str
    user_name: str
    email: str
    token_id: str
    expires_at: str | None
    # A platform administrator (not a workspace role): issues tokens to others, names any host path.
    platform_admin: bool = False


@dataclass(frozen=True)
class Scope:
    principal: Principal
    workspace_id: str
    workspace_name: str
    role: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"
