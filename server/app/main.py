"""Builds the FastAPI application of the coordinator (and nothing else)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from reservoir import __version__
from reservoir.common.http_boundary import BodyLimit, protect
from reservoir.common.openapi import operation_id
from reservoir.server.app import db, web, webhooks
from reservoir.server.app.agent_client import TIMEOUT as AGENT_TIMEOUT
from reservoir.server.app.agent_client import (
    HttpAgentClient,
    OneShotVolumeLister,
    VolumeLister,
    agent_trust,
)
from reservoir.server.app.api import deps
from reservoir.server.app.api.routes import (
    agent_proxy,
    agents,
    campaigns,
    health,
    links,
    metrics,
    telemetry,
    transfers,
    volume_sets,
)
from reservoir.server.app.campaign_watch import CampaignWatcher
from reservoir.server.app.core.agent_credentials import AgentCredentials
from reservoir.server.app.core.config import ServerSettings, SettingsError
from reservoir.server.app.errors import install_handlers
from reservoir.server.app.leadership import Leadership, holder_name
from reservoir.server.app.webhooks import WebhookSender
from reservoir.server.domain.equalizer_loop import EqualizerLoop
from reservoir.server.domain.probe import LinkProber
from reservoir.server.domain.scheduler import AgentScheduler, NoopScheduler, Scheduler
from reservoir.server.domain.telemetry import TelemetryCollector

__all__ = ["API_PREFIX", "create_app"]

API_PREFIX = "/api/v1"


@dataclass
class _Loops:
    """What acts on its own and runs only while this coordinator leads: the scheduler
    and, with the agents' scheduler, the telemetry collector and the equalizer; the
    webhook sender where webhooks are set. A set runs once: the next leadership gets a
    new set (``_Services.new_loops``)."""

    scheduler: Scheduler
    collector: TelemetryCollector | None
    equalizer: EqualizerLoop | None
    webhooks: WebhookSender | None = None
    ran: bool = False

    async def start(self, sessions: sessionmaker[Session]) -> None:
        self.ran = True
        if isinstance(self.scheduler, AgentScheduler):
            await self.scheduler.start(sessions)
        if self.collector is not None:
            await self.collector.start()
        if self.equalizer is not None:
            await self.equalizer.start()
        if self.webhooks is not None:
            await self.webhooks.start()

    async def stop(self) -> None:
        """Stops them (those never started only close their clients)."""
        if self.webhooks is not None:
            await self.webhooks.stop()
        if self.equalizer is not None:
            await self.equalizer.stop()
        if self.collector is not None:
            await self.collector.stop()
        if isinstance(self.scheduler, AgentScheduler):
            await self.scheduler.stop()


@dataclass
class _Services:
    """What the app runs beside its routes, started and stopped by its lifespan; what
    acts on its own runs only while this coordinator holds the leader's lease
    (``leadership.py``)."""

    settings: ServerSettings
    engine: Engine
    sessions: sessionmaker[Session]
    loops: _Loops
    new_loops: Callable[[], _Loops]
    prober: LinkProber
    proxy: HttpAgentClient
    watcher: CampaignWatcher
    state: Any = None  # the app's state, where the routes find the current scheduler
    leadership: Leadership | None = None

    async def start(self) -> None:
        db.upgrade(self.engine)
        self.leadership = Leadership(
            self.sessions,
            lease=self.settings.lease_seconds,
            url=self.settings.public_url,
            holder=holder_name(self.settings.listen),
            on_elected=self._lead,
            on_deposed=self._stand_by,
        )
        self.state.leadership = self.leadership
        await self.leadership.start()

    async def _lead(self) -> None:
        if self.loops.ran:
            self.loops = self.new_loops()
            self.state.scheduler = self.loops.scheduler
        await asyncio.to_thread(self.prober.recover)
        await self.loops.start(self.sessions)
        await self.watcher.start()

    async def _stand_by(self) -> None:
        await self.watcher.stop()
        await self.loops.stop()

    async def stop(self) -> None:
        if self.leadership is not None:
            await self.leadership.stop()
        if not self.loops.ran:
            await self.loops.stop()
        await self.prober.stop()
        await self.proxy.aclose()
        self.engine.dispose()


def _services(
    settings: ServerSettings,
    credentials: AgentCredentials,
    trust: ssl.SSLContext | bool,
    *,
    engine: Engine | None,
    scheduler: Scheduler | None,
    collector: TelemetryCollector | None,
    equalizer: EqualizerLoop | None,
    campaign_watcher: CampaignWatcher | None,
) -> _Services:
    """The given services, and defaults for the others: the scheduler of
    ``settings.scheduler`` and, with the agents' scheduler, the telemetry collector and
    the equalizer; each talks to the agents with the tokens ``credentials`` derive.
    Given loops serve the first leadership; later ones get defaults."""
    engine = engine or db.make_engine(settings.database_url)
    urls = [str(url) for url in settings.webhook_urls]
    sessions = db.make_sessions(engine, info={webhooks.URLS_KEY: urls})
    secret = webhook_secret(settings)

    def client(timeout: float = AGENT_TIMEOUT) -> HttpAgentClient:
        return HttpAgentClient(credentials, timeout=timeout, verify=trust)

    def new_loops(
        scheduler: Scheduler | None = None,
        collector: TelemetryCollector | None = None,
        equalizer: EqualizerLoop | None = None,
    ) -> _Loops:
        if scheduler is None:
            scheduler = (
                AgentScheduler(
                    sessions,
                    client(),
                    interval=settings.scheduler_interval,
                    retry_for=settings.leg_retry_seconds,
                )
                if settings.scheduler == "agents"
                else NoopScheduler()
            )
        if collector is None and isinstance(scheduler, AgentScheduler):
            collector = TelemetryCollector(sessions, client(5.0), on_copy_ended=scheduler.wake)
        if equalizer is None and isinstance(scheduler, AgentScheduler):
            equalizer = EqualizerLoop(sessions, client())
        sender = WebhookSender(sessions, secret=secret) if urls else None
        return _Loops(scheduler, collector, equalizer, sender)

    return _Services(
        settings=settings,
        engine=engine,
        sessions=sessions,
        loops=new_loops(scheduler, collector, equalizer),
        new_loops=new_loops,
        prober=LinkProber(sessions, client(30)),
        proxy=client(agent_proxy.TIMEOUT),  # routes/agent_proxy.py
        watcher=campaign_watcher or CampaignWatcher(sessions),
    )


def webhook_secret(settings: ServerSettings) -> bytes | None:
    """The key webhooks are signed with (``webhook_secret_file``), read at start."""
    path = settings.webhook_secret_file
    if path is None:
        return None
    try:
        secret = path.read_bytes().strip()
    except OSError as exc:
        raise SettingsError(f"webhook_secret_file {path}: {exc.strerror}") from None
    if len(secret) < 16:
        raise SettingsError(f"webhook_secret_file {path}: 16 bytes at least")
    return secret


def _include_routes(app: FastAPI) -> None:
    api = APIRouter(prefix=API_PREFIX)
    for module in (
        health,
        agents,
        agent_proxy,
        volume_sets,
        links,
        transfers,
        telemetry,
        campaigns,
    ):
        api.include_router(module.router)
    app.include_router(api)
    app.include_router(metrics.router)
    web.mount(app)  # the dashboard at /, after every API route


def _protect(
    app: FastAPI,
    settings: ServerSettings,
    credentials: AgentCredentials,
    sessions: sessionmaker[Session],
) -> None:
    """Bodies bounded (larger for the campaign upload), tokens checked before a body is
    read, NaN refused, 422s without the input: ``reservoir.common.http_boundary``."""
    upload = BodyLimit(settings.max_upload_bytes, "max_upload_bytes")
    protect(
        app,
        limit=BodyLimit(settings.max_body_bytes, "max_body_bytes"),
        larger={API_PREFIX + path: upload for path in campaigns.UPLOAD_PATHS},
        token_dependency=deps.get_token,  # every route with a token: users' and heartbeats
        check_token=lambda headers: deps.token_problem(headers, settings, credentials, sessions),
    )


def create_app(
    settings: ServerSettings,
    *,
    engine: Engine | None = None,
    scheduler: Scheduler | None = None,
    collector: TelemetryCollector | None = None,
    equalizer: EqualizerLoop | None = None,
    campaign_watcher: CampaignWatcher | None = None,
    credentials: AgentCredentials | None = None,
    volume_lister: VolumeLister | None = None,
) -> FastAPI:
    """The app; its lifespan upgrades the database to the latest revision first, then
    takes part in the leader's lease (``leadership.py``): while this coordinator leads
    it runs the scheduler (``settings.scheduler``: ``agents`` runs transfers on the
    agents, ``off`` only records them) and, with the agents' scheduler, the telemetry
    collector (``telemetry.py``) and the equalizer (``equalizer_loop.py``), the webhook
    sender (``webhooks.py``) and the watcher of campaign runs (``campaign_watch.py``);
    it stops them at the end.

    ``credentials`` default to the key of ``settings.secret_key_path``, read (or made)
    here: an unusable key file raises ``SecretKeyError`` before anything else opens.
    ``volume_lister`` asks agents for their volumes at registration (default: a
    client of its own per registration)."""
    credentials = credentials or AgentCredentials.from_file(settings.secret_key_path)
    trust = agent_trust(settings.agent_ca_file)  # read once, for every client of agents
    services = _services(
        settings,
        credentials,
        trust,
        engine=engine,
        scheduler=scheduler,
        collector=collector,
        equalizer=equalizer,
        campaign_watcher=campaign_watcher,
    )
    app = _fastapi(services)
    app.state.settings = settings
    app.state.credentials = credentials
    app.state.volume_lister = volume_lister or OneShotVolumeLister(credentials, verify=trust)
    _expose(app, services)
    install_handlers(app)
    _protect(app, settings, credentials, services.sessions)
    _allow_origins(app, settings)
    _include_routes(app)
    return app


def _fastapi(services: _Services) -> FastAPI:
    """The FastAPI app, its lifespan starting and stopping ``services``."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await services.start()
        try:
            yield
        finally:
            await services.stop()

    return FastAPI(
        title="Reservoir coordinator",
        version=__version__,
        description="Agents, volume sets, links and block transfers across them.",
        lifespan=lifespan,
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=f"{API_PREFIX}/docs",
        redoc_url=None,
        generate_unique_id_function=operation_id,
    )


def _expose(app: FastAPI, services: _Services) -> None:
    """The services the routes reach through ``app.state`` (``api/deps.py``)."""
    services.state = app.state
    app.state.sessions = services.sessions
    app.state.scheduler = services.loops.scheduler
    app.state.leadership = None  # the lifespan's (routes: deps.require_leader)
    app.state.prober = services.prober
    app.state.agent_proxy = services.proxy
    app.state.campaigns = services.watcher


def _allow_origins(app: FastAPI, settings: ServerSettings) -> None:
    """CORS for the origins the settings name (none by default)."""
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )
