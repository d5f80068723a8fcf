"""Host tuning profiles (config/tuning/*.toml), applied and reverted by the agent.

In the spirit of ESnet's fasterdata host tuning: TCP buffer limits, congestion
control, MTU probing, backlog, the default qdisc (``[sysctl]``) and per
interface MTU, transmit queue length and interrupt coalescing (``[nic]``)::

    profile = load_profile("lfn-1g")
    report = apply_profile(profile, Host.local(), interfaces=["eth1"])
    ...
    revert(Host.local())          # exactly the values from before the first apply

Each setting is reported ``changed`` (before -> after), ``unchanged``,
``refused`` (with the kernel's reason; the rest is still applied) or
``skipped`` (an optional setting this kernel lacks). The originals live in a
state file per network namespace (see ``_state``). CLI: ``reservoir agent tune`` (:mod:`.cli`).
"""

from ._apply import (
    CHANGED,
    REFUSED,
    SKIPPED,
    UNCHANGED,
    WOULD_CHANGE,
    Outcome,
    Report,
    apply_profile,
    format_table,
    revert,
)
from ._host import (
    Coalescer,
    Ethtool,
    Host,
    HostRefusedError,
    Links,
    LinkState,
    NetlinkLinks,
    Sysctl,
    netns_inode,
    parse_coalesce,
)
from ._profile import (
    PROFILE_DIR,
    NicSettings,
    Profile,
    ProfileError,
    SysctlSetting,
    load_profile,
    parse_profile,
    resolve_profile,
)
from ._state import STATE_DIR, StateError, read_state, state_path

__all__ = [
    "CHANGED",
    "PROFILE_DIR",
    "REFUSED",
    "SKIPPED",
    "STATE_DIR",
    "UNCHANGED",
    "WOULD_CHANGE",
    "Coalescer",
    "Ethtool",
    "Host",
    "HostRefusedError",
    "LinkState",
    "Links",
    "NetlinkLinks",
    "NicSettings",
    "Outcome",
    "Profile",
    "ProfileError",
    "Report",
    "StateError",
    "Sysctl",
    "SysctlSetting",
    "apply_profile",
    "format_table",
    "load_profile",
    "netns_inode",
    "parse_coalesce",
    "parse_profile",
    "read_state",
    "resolve_profile",
    "revert",
    "state_path",
]
