"""The pacing component: per-NIC pacing, per-socket pacing, per-connection cwnd caps."""
