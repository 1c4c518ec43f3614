"""The ports wakeful gives a server it starts (a drill's fresh Redis, a cluster's nodes) must be
ones a server can listen on, on this machine's real sockets."""

from __future__ import annotations

import socket

from wakeful.core import process


def test_a_port_an_outgoing_connection_holds_is_not_free_though_nothing_listens_on_it() -> None:
    """An outgoing connection's own end (an ephemeral port, in the range the stack's ports come
    from) answers no connect, yet a server's bind there fails with "Address already in use"."""
    with socket.socket() as server, socket.socket() as client:
        server.bind(("127.0.0.1", 0))
        server.listen()
        client.connect(server.getsockname())
        held = client.getsockname()[1]
        assert not process.port_in_use(held)  # what a connect sees: nothing listens there
        assert not process.port_free(held)
        assert not process.port_free(server.getsockname()[1])  # a listener's port is taken too
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        idle = probe.getsockname()[1]
    assert process.port_free(idle)
