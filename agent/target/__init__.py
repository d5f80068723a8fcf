"""The builtin iSCSI target (RFC 7143): portals, login, sessions, tasks, discovery and
its persistent configuration; :mod:`reservoir.agent.target.server` is where to start."""
