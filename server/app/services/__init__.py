"""The registry and the transfers: one module per resource, called by the routes.

Each function takes the request's ``Session``, raises the errors of ``errors.py``,
and commits what it changed.
"""

__all__: list[str] = []
