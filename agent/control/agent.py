"""The agent: its settings, its copy manager and, if configured, its builtin iSCSI target,
started and stopped together inside one event loop (the API server's)."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

from reservoir.agent.control.copies import CopyFn, CopyManager
from reservoir.agent.control.core.config import AgentSettings, AgentSettingsError
from reservoir.agent.control.heartbeat import Heartbeat
from reservoir.agent.control.iperf import IperfManager
from reservoir.agent.control.nic_pacing import NicPacer
from reservoir.agent.control.volumes import Volumes
from reservoir.agent.initiator import PoolSettings, Session, SessionPool
from reservoir.agent.target import config as target_config
from reservoir.agent.target.server import TargetServer
from reservoir.agent.transfer import copy as engine_copy
from reservoir.common.trust import trust
from reservoir.pacing import CwndCaps

__all__ = ["Agent"]

log = logging.getLogger("reservoir.agent")


class Agent:
    def __init__(
        self,
        settings: AgentSettings,
        *,
        copy_fn: CopyFn = engine_copy,
        target: target_config.TargetConfig | None = None,
    ) -> None:
        self.settings = settings
        if target is None and settings.target_config is not None:
            target = target_config.load(settings.target_config)
        self.target_config = target
        self.volumes = Volumes(settings.source_volumes, target)
        self.target: TargetServer | None = None
        self.caps: CwndCaps | None = None
        self.manager = CopyManager(
            Path(settings.state_dir),
            copy_fn=copy_fn,
            max_running=settings.max_running,
            volumes=self.volumes,
        )
        self.iperf = IperfManager(lambda: self.manager.pacer)
        self.heartbeat: Heartbeat | None = None

    async def start(self) -> None:
        heartbeat = self._heartbeat()  # a bad token file stops the start before anything
        self._open_caps()
        self._open_pacer()
        self.manager.pool = self._session_pool()
        count = self.manager.load()
        log.info("agent %s: %d copies in %s", self.settings.name, count, self.settings.state_dir)
        if self.target_config is not None:
            server = TargetServer(self.target_config, mptcp=self.settings.target_mptcp)
            try:
                await server.start()
            except BaseException:
                await server.stop(grace=0)
                raise
            self.target = server
            self._open_windows(server)
        if heartbeat is not None:
            heartbeat.start()
            self.heartbeat = heartbeat

    async def stop(self) -> None:
        if self.heartbeat is not None:
            await self.heartbeat.close()
            self.heartbeat = None
        await self.iperf.close()
        await self.manager.close()
        if self.manager.pool is not None:  # after the copies gave their sessions back
            await self.manager.pool.close()
            self.manager.pool = None
        if self.target is not None:
            await self.target.stop()
            self.target = None
        if self.caps is not None:
            self.caps.close()
            self.caps = None
        if self.manager.pacer is not None:
            self.manager.pacer.close()
            self.manager.pacer = None

    def _heartbeat(self) -> Heartbeat | None:
        """Heartbeats to the coordinator, when one is configured, with the token read
        from ``coordinator_token_file``."""
        s = self.settings
        if s.coordinator is None or s.coordinator_token_file is None:
            return None
        try:
            token = s.coordinator_token_file.read_text().strip()
        except OSError as exc:
            raise AgentSettingsError(
                f"coordinator_token_file {s.coordinator_token_file}: {exc.strerror}"
            ) from None
        if not token:
            raise AgentSettingsError(f"coordinator_token_file {s.coordinator_token_file} is empty")
        try:
            verify = trust(s.coordinator_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise AgentSettingsError(
                f"coordinator_ca_file {s.coordinator_ca_file}: {exc}"
            ) from None
        log.info("heartbeats to %s every %g s", s.coordinator, s.heartbeat_interval)
        return Heartbeat(s.coordinator, token, s.heartbeat_interval, verify=verify, name=s.name)

    def _open_caps(self) -> None:
        """The cwnd cap mechanism, opened before any copy makes a connection (the BPF
        program covers the sockets made after it is attached)."""
        wanted = self.settings.cwnd_caps
        if wanted == "off":
            return
        self.caps = CwndCaps.open(use_bpf=wanted == "bpf")
        self.manager.capper = self.caps
        why = f" ({self.caps.why_not_bpf})" if wanted == "bpf" and self.caps.why_not_bpf else ""
        log.info("cwnd caps: %s%s", self.caps.mechanism, why)
        if self.settings.jump_start and self.caps.can_jump:
            self.manager.starter = self.caps
            log.info("jump start: copies paced per NIC start their connections at their rate")

    def _open_windows(self, server: TargetServer) -> None:
        """The target's portals offer ``initial_receive_window`` from a connection's
        first segment (the BPF program's; the kernel's 64 KiB otherwise)."""
        size = self.settings.initial_receive_window
        if not size or self.caps is None or not self.caps.can_jump:
            return
        for port in sorted(set(server.bound_ports())):
            self.caps.open_window(port, size)
        log.info("target: connections start with a %d-byte receive window", size)

    def _session_pool(self) -> SessionPool[Session] | None:
        """The warm sessions the copies share (None: ``warm_sessions = 0``)."""
        s = self.settings
        if s.warm_sessions == 0:
            return None
        per_path = min(s.warm_sessions_per_path, s.warm_sessions)
        limits = PoolSettings(s.warm_idle_timeout, per_key=per_path, total=s.warm_sessions)
        return SessionPool(limits)

    def _open_pacer(self) -> None:
        """NIC pacing for the copies whose caps ask for it; first removes what an agent
        that died left on the NICs."""
        if not self.settings.nic_pacing:
            return
        pacer = NicPacer(Path(self.settings.state_dir) / "pacing")
        pacer.start()
        self.manager.pacer = pacer

    def portals(self) -> list[str]:
        if self.target_config is None:
            return []
        return [target_config.format_portal(h, p) for h, p in self.target_config.portals]
