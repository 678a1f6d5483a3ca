"""HTTPS serving with server.tls, and client-certificate verification with clientCAFile."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
from http_calls import free_port

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=test-ca", cwd=d)
    for name, cn in (("server", "127.0.0.1"), ("client", "kube-scheduler")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={cn}", cwd=d)
        ext = d / f"{name}.ext"
        ext.write_text("subjectAltName=IP:127.0.0.1\n" if name == "server" else "extendedKeyUsage=clientAuth\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.crt", "-days", "2", "-extfile", str(ext), cwd=d)
    return d


@pytest.fixture(scope="module")
def server(pki: Path) -> Iterator[int]:
    """The server's port; its log is ``pki / "server.log"``."""
    config = pki / "config.yaml"
    config.write_text(f"""apiVersion: kube-extender.io/v1alpha1
kind: ExtenderConfiguration
server:
  tls: {{certFile: {pki / 'server.crt'}, keyFile: {pki / 'server.key'}, clientCAFile: {pki / 'ca.crt'}}}
""")
    port = free_port()
    with open(pki / "server.log", "wb") as log:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "kube-extender"), "serve", "--config",
                                 str(config), "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def context(pki: Path, with_client_cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if with_client_cert:
        ctx.load_cert_chain(str(pki / "client.crt"), str(pki / "client.key"))
    return ctx


@pytest.mark.slow
def test_https_with_a_client_certificate(server: int, pki: Path) -> None:
    with urllib.request.urlopen(f"https://127.0.0.1:{server}/healthz", context=context(pki, True), timeout=10) as r:
        assert r.status == 200


@pytest.mark.slow
def test_a_client_without_certificate_is_refused(server: int, pki: Path) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):  # type: ignore[attr-defined]
        with urllib.request.urlopen(f"https://127.0.0.1:{server}/healthz", context=context(pki, False),
                                    timeout=10) as r:
            r.read()


@pytest.mark.slow
def test_a_client_that_ends_tls_abruptly_only_ends_its_connection(server: int, pki: Path) -> None:
    """TCP closed without TLS's close_notify - before the handshake, after it, mid-request - ends
    that connection quietly; the next client is served, and nothing in the log is an error."""
    with socket.create_connection(("127.0.0.1", server), timeout=10):
        pass  # before the handshake
    for data in (b"", b"POST /scheduler/filter HTTP/1.1\r\nContent-Length: 100\r\n\r\n{"):
        raw = socket.create_connection(("127.0.0.1", server), timeout=10)
        tls = context(pki, True).wrap_socket(raw, server_hostname="127.0.0.1")
        if data:
            tls.sendall(data)
        tls.shutdown(socket.SHUT_RDWR)  # the TCP connection only: no close_notify
        tls.close()
    with urllib.request.urlopen(f"https://127.0.0.1:{server}/healthz", context=context(pki, True), timeout=10) as r:
        assert r.status == 200
    log = (pki / "server.log").read_text()
    assert "Traceback" not in log and "level=error" not in log and "[ERROR]" not in log, log[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("worker", ["gevent", "gthread"])
@pytest.mark.parametrize("cert", ["garbage.crt", "missing.crt"])
def test_serve_with_an_unusable_certificate_exits_in_one_line(pki: Path, tmp_path: Path, cert: str,
                                                              worker: str) -> None:
    """A certificate that is not one sent the gevent worker into a crash loop (the master
    restarting it for ever) and left the gthread worker failing every handshake; a missing one
    was gunicorn's traceback. The real command refuses both before it listens."""
    (tmp_path / "garbage.crt").write_text("not a certificate\n")
    config = tmp_path / "config.yaml"
    config.write_text(f"server: {{worker: {worker}, "
                      f"tls: {{certFile: {tmp_path / cert}, keyFile: {pki / 'server.key'}}}}}\n")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "kube-extender"), "serve", "--config", str(config),
                             "--port", str(free_port())], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the master and its worker
        _, stderr = proc.communicate()
        pytest.fail(f"serve did not exit: {stderr[-2000:]}")
    problem = "no PEM certificate in" if cert == "garbage.crt" else "cannot read"
    assert proc.returncode == 1, stderr[-2000:]
    assert stderr.splitlines() == [
        f"{config}: server.tls.certFile: {problem} {tmp_path / cert}"
        + (": No such file or directory" if cert == "missing.crt" else ""),
        f"kube-extender: {config} is not a valid configuration (1 problem)",
    ]


def test_scheduler_stanza_carries_the_tls_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from extender.cli import main
    f = tmp_path / "c.yaml"
    f.write_text("""apiVersion: kube-extender.io/v1alpha1
kind: ExtenderConfiguration
extender: {urlPrefix: "https://ext.kube-system.svc:8443/scheduler",
           tlsConfig: {caFile: /etc/ext/ca.crt, certFile: /etc/ext/tls.crt, keyFile: /etc/ext/tls.key}}
""")
    assert main(["config", "scheduler", "--config", str(f)]) == 0
    entry = yaml.safe_load(capsys.readouterr().out)["extenders"][0]
    assert entry["enableHTTPS"] is True
    assert entry["tlsConfig"] == {"caFile": "/etc/ext/ca.crt", "certFile": "/etc/ext/tls.crt",
                                  "keyFile": "/etc/ext/tls.key"}
