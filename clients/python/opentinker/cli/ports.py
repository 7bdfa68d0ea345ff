"""Is a TCP port free to listen on?"""

import socket


def port_is_free(host: str, port: int) -> bool:
    """True when a server could listen on host:port now.

    SO_REUSEADDR is set, as servers set it, so a port only in TIME_WAIT counts as free;
    a port some process listens on (on this host or on 0.0.0.0) counts as taken."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host.strip("[]"), port))
            sock.listen(1)
        except OSError:
            return False
    return True
