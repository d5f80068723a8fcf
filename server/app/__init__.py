"""The coordinator's app: the REST API (``api/``), its services (``services/``), the API's
models, the database (tables, Alembic migrations), settings and secrets (``core/``),
the dashboard's files and metrics.

Its records (``core``, ``db``, ``tables``, ``models``, ``errors``, ``events``,
``agent_client``) sit below :mod:`reservoir.server.domain`, which works on them; the
API, the services and the entry points (``main``, ``serve``) sit above it.
"""
