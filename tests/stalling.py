"""A loopback server that sends a scripted answer in raw pieces and can stall between them.

Each request is answered with ``pieces``: bytes sent as they are (status line and headers
included, so a test controls every byte), or ``Stalling.STALL`` to wait until ``release`` is
set. ``stalled`` is set when the server starts waiting.
"""

import socket
import threading

LIVENESS_S = 60  # a guard against hanging forever, not a timing assertion


class Stalling:
    """Answers each request with ``pieces``: bytes to send, or ``STALL`` to wait until released."""

    STALL = object()

    def __init__(self):
        self.pieces = []
        self.release = threading.Event()
        self.stalled = threading.Event()
        self.requests = 0
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.base_url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._threads = []
        self._closing = False
        self._accepter = threading.Thread(target=self._accept, daemon=True)

    def _accept(self):
        while not self._closing:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn):
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            length = next(
                (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0
            )
            while len(rest) < length:
                rest += conn.recv(65536)
            self.requests += 1
            try:
                for piece in self.pieces:
                    if piece is Stalling.STALL:
                        self.stalled.set()
                        self.release.wait(LIVENESS_S)
                    else:
                        conn.sendall(piece)
            except OSError:
                pass

    def __enter__(self):
        self._accepter.start()
        return self

    def __exit__(self, *exc):
        self._closing = True
        self.release.set()
        self._sock.close()


def head(status, reason, content_type, length=None):
    lines = [f"HTTP/1.1 {status} {reason}", f"content-type: {content_type}", "request-id: req_stall", "connection: close"]
    if length is not None:
        lines.append(f"content-length: {length}")  # else the body ends when the connection closes
    return ("\r\n".join(lines) + "\r\n\r\n").encode()
