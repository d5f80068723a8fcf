"""Authentication before the body.

FastAPI reads and parses a route's body before it runs the route's dependencies, the
token check among them: a client without a token could make the server read and parse
a body as large as the limit allows. Here, when the app first asks for the body of a
request to a route that needs a token (one that depends on the app's token
dependency), the token is checked from the headers, and a request without a valid
one is refused with 401 before a byte of its body is read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.types import Scope

from ._refusal import RefusedError

__all__ = ["TokenCheck", "TokenRefusedError", "TokenRoutes", "depends_on"]

TokenCheck = Callable[[Headers], str | None]
"""Why the request's headers do not authenticate it (the 401's detail), or None."""


class TokenRefusedError(RefusedError):
    code = "unauthorized"

    def __init__(self, detail: str) -> None:
        super().__init__(401, detail, headers={"WWW-Authenticate": "Bearer"})


def depends_on(dependant: Dependant, call: Callable[..., Any]) -> bool:
    """Whether ``call`` is among the dependencies of ``dependant``, at any depth."""
    return any(d.call is call or depends_on(d, call) for d in dependant.dependencies)


class TokenRoutes:
    """Which routes need a token: those that depend on ``dependency``."""

    def __init__(self, dependency: Callable[..., Any], check: TokenCheck) -> None:
        self.dependency, self.check = dependency, check
        self._known: dict[int, bool] = {}

    def refuse_unauthenticated(self, scope: Scope) -> None:
        """Raises :class:`TokenRefusedError` when the route chosen for ``scope`` (the
        router records it before the route reads the body) needs a token the headers
        do not give."""
        if self._needs_token(scope.get("route")):
            problem = self.check(Headers(scope=scope))
            if problem is not None:
                raise TokenRefusedError(problem)

    def _needs_token(self, route: object) -> bool:
        if not isinstance(route, APIRoute):
            return False
        if id(route) not in self._known:
            self._known[id(route)] = depends_on(route.dependant, self.dependency)
        return self._known[id(route)]
