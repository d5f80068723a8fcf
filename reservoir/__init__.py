"""Reservoir: wide-area block transfer over parallel iSCSI/TCP streams.

The import packages live under ``reservoir``: ``reservoir.agent`` is the
agent/ folder (iSCSI protocol, target, storage engine).
"""

__version__ = "0.1.0"
