"""HTTP/1.1 over one raw socket: requests written byte for byte as given (so they can lie),
replies read back in order."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    close: bool
    """The server said ``Connection: close`` (or spoke HTTP/1.0)."""

    def json(self) -> Any:
        return json.loads(self.body)


class ServerClosed(Exception):
    """The server closed the connection before (or while) sending a reply."""


class Conn:
    """An HTTP/1.1 connection on a raw socket: requests written as given, replies read in order."""

    def __init__(self, port: int, timeout: float = 20.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def stop_sending(self) -> None:
        self.sock.shutdown(socket.SHUT_WR)

    def _fill(self) -> None:
        try:
            data = self.sock.recv(1 << 16)
        except ConnectionResetError as exc:
            raise ServerClosed("connection reset") from exc
        if not data:
            raise ServerClosed("connection closed")
        self.buf += data

    def reply(self, interim: bool = False) -> Reply:
        """The next reply; 1xx replies are skipped unless ``interim``."""
        while True:
            while b"\r\n\r\n" not in self.buf:
                self._fill()
            head, _, self.buf = self.buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            version, status = lines[0].split(" ", 2)[:2]
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            if 100 <= int(status) < 200 and not interim:
                continue
            close = version == "HTTP/1.0" or headers.get("connection", "").lower() == "close"
            if 100 <= int(status) < 200:
                return Reply(int(status), headers, b"", False)
            if "content-length" in headers:
                length = int(headers["content-length"])
                while len(self.buf) < length:
                    self._fill()
                body, self.buf = self.buf[:length], self.buf[length:]
            elif headers.get("transfer-encoding", "").lower() == "chunked":
                body = self._chunked()
            else:
                try:
                    while True:
                        self._fill()
                except ServerClosed:
                    pass
                body, self.buf = self.buf, b""
                close = True
            return Reply(int(status), headers, body, close)

    def _chunked(self) -> bytes:
        out = b""
        while True:
            while b"\r\n" not in self.buf:
                self._fill()
            size_line, _, self.buf = self.buf.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            while len(self.buf) < size + 2:
                self._fill()
            out, self.buf = out + self.buf[:size], self.buf[size + 2:]
            if size == 0:
                return out


def request(method: str, target: str, body: bytes, *headers: str, length: int | None = None,
            content_type: str | None = "application/json") -> bytes:
    """A request as kube-scheduler's Go client writes it (plus ``headers``)."""
    head = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", "User-Agent: Go-http-client/1.1"]
    if length is not None:
        head.append(f"Content-Length: {length}")
    if content_type is not None:
        head.append(f"Content-Type: {content_type}")
    head += ["Accept-Encoding: gzip", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def chunked(body: bytes, sizes: list[int]) -> bytes:
    out, at = b"", 0
    for size in sizes:
        if at >= len(body):
            break
        piece, at = body[at:at + size], at + size
        out += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    if at < len(body):
        out += f"{len(body) - at:x}\r\n".encode() + body[at:] + b"\r\n"
    return out + b"0\r\n\r\n"
