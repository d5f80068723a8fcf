"""The agent: iSCSI protocol, builtin target and storage engine of a disk server."""
