"""The boundary of the project's HTTP APIs (the agent's control API, the coordinator):
what a request's body meets before a route parses it, and what an error may say.

:class:`BoundaryMiddleware` hands the app a ``receive`` that refuses, before the body
is parsed:

- a request to a route that needs a token, without a valid one: 401 before the first
  byte of its body is read (``_token_first``);
- a body over its limit (:class:`BodyLimit`, larger for named paths such as an
  upload): 413 before it is read when its length is declared, or as soon as a chunked
  one passes the limit (``_body_limit``);
- NaN or Infinity in a JSON body: 422 (``_finite_json``).

:func:`install_problems` makes every error answer a problem (RFC 9457,
:mod:`reservoir.common.problems`) with a stable ``code`` and the request's id, which
every answer also carries in ``X-Request-ID`` (:mod:`reservoir.common.request_id`); a
422 lists the location, message and type of each error (at most :data:`MAX_ERRORS`),
never the input (``_validation``); an exception nothing handled is a 500 that says
nothing of it (``_problems``).
"""

from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI

from ._body_limit import BodyLimit, BodyTooLargeError
from ._finite_json import NON_FINITE, JsonWatch, NonFiniteJsonError, has_non_finite_number
from ._guard import BoundaryMiddleware
from ._problems import (
    ProblemResponse,
    UnhandledErrorMiddleware,
    install_problems,
    problem_response,
    send_problem,
)
from ._refusal import RefusedError
from ._token_first import TokenCheck, TokenRefusedError, TokenRoutes, depends_on
from ._validation import MAX_ERRORS, public_errors

__all__ = [
    "MAX_ERRORS",
    "NON_FINITE",
    "BodyLimit",
    "BodyTooLargeError",
    "BoundaryMiddleware",
    "JsonWatch",
    "NonFiniteJsonError",
    "ProblemResponse",
    "RefusedError",
    "TokenCheck",
    "TokenRefusedError",
    "TokenRoutes",
    "UnhandledErrorMiddleware",
    "depends_on",
    "has_non_finite_number",
    "install_problems",
    "problem_response",
    "protect",
    "public_errors",
    "send_problem",
]


def protect(
    app: FastAPI,
    *,
    limit: BodyLimit,
    larger: Mapping[str, BodyLimit] | None = None,
    token_dependency: Callable[..., Any],
    check_token: TokenCheck,
) -> None:
    """Installs the boundary on ``app``: ``limit`` for every body, ``larger`` for the
    paths it names; routes that depend on ``token_dependency`` need a token, which
    ``check_token`` checks from the headers; every error is answered as a problem
    (:func:`install_problems`, outside the boundary: its refusals carry the request id
    too). Middleware added to ``app`` later (CORS) runs outside, so its headers reach
    these answers too."""
    tokens = TokenRoutes(token_dependency, check_token)
    app.add_middleware(BoundaryMiddleware, limit=limit, larger=larger, tokens=tokens)
    install_problems(app)
