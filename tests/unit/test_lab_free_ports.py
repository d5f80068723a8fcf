"""free_ports: several ports chosen at once are all different and free."""

from __future__ import annotations

import socket

from reservoir.lab.peers import free_ports


def test_ports_chosen_together_are_different_and_can_be_bound() -> None:
    ports = free_ports(64)
    assert len(ports) == 64 and len(set(ports)) == 64
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[0]))  # released again once chosen
