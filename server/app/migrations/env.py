"""Alembic environment: the engine comes from :func:`reservoir.server.app.db.upgrade`.

From a shell, ``alembic -c server/alembic.ini -x url=sqlite:///server.db upgrade head``
(or ``revision --autogenerate -m ...`` after changing ``tables.py``).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Engine

from reservoir.server.app.db import make_engine
from reservoir.server.app.tables import Base

target_metadata = Base.metadata


def _engine() -> Engine:
    engine = context.config.attributes.get("engine")
    if isinstance(engine, Engine):
        return engine
    url = context.get_x_argument(as_dictionary=True).get("url")
    if not url:
        raise SystemExit("give the database with -x url=SQLALCHEMY_URL")
    return make_engine(url)


def run_migrations_offline() -> None:
    url = context.get_x_argument(as_dictionary=True).get("url", "sqlite://")
    context.configure(url=url, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    with _engine().connect() as connection:
        context.configure(
            connection=connection, target_metadata=target_metadata, render_as_batch=True
        )
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
