"""The container image: `make image` builds it from the Dockerfile, and it runs as the chart runs
it: its entrypoint and command, UID/GID 65532, a read-only root filesystem with a tmpfs on /tmp,
and SIGTERM ending it with status 0.

No registry and no container daemon are reachable here, so this is the path of a user with a
private base image and no index: the base is a Debian bookworm root filesystem made by
mmdebstrap (python3, python3-venv) and imported into buildah, passed as ``BASE_IMAGE``; pip in the
build installs from the dependency wheels served on loopback (``PIP_INSTALL_OPTIONS``). buildah
runs daemonless as root with the ``vfs`` storage driver (no overlay inside this sandbox) and
``chroot`` isolation (no OCI runtime can start here); its storage and the base image are cached
between runs (tests/release/artifacts.py), so only the first run pays for mmdebstrap.

``buildah run`` has no read-only option. The run below makes the container's root filesystem a
read-only bind mount of itself in a private mount namespace, with tmpfs on /tmp (the chart's
emptyDir) and on /run (buildah creates and removes its /run/.containerenv mount point there, and
UID 65532 cannot write in /run anyway), then lets ``buildah run`` start the image's entrypoint
inside it. A write anywhere else fails with EROFS, as under ``readOnlyRootFilesystem: true``;
the run test first proves that the harness does this.
"""

from __future__ import annotations

import http.server
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from http_calls import free_port
from policy_guide import blocks, file_writes
from artifacts import (REPO, cache_dir, check_serves_the_demo, key, locked, running, stop_cleanly, wait_ready,
                       wheelhouse)

pytestmark = pytest.mark.slow

MMDEBSTRAP = ["mmdebstrap", "--variant=minbase", "--include=python3,python3-venv", "bookworm"]
IMAGE = "localhost/kube-extender-test"
VALUES = yaml.safe_load((REPO / "charts" / "kube-extender" / "values.yaml").read_text())


def require_tools() -> None:
    missing = [tool for tool in ("buildah", "mmdebstrap", "unshare") if shutil.which(tool) is None]
    if missing and os.geteuid() == 0 and shutil.which("apt-get"):
        pytest.fail(f"{', '.join(missing)} not installed: `make tools` installs them with apt-get")
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed, and installing needs root and apt-get")
    if os.geteuid() != 0:
        pytest.skip("running the image (mount namespaces, chroot isolation) needs root")


def buildah_command(*args: str) -> list[str]:
    storage = cache_dir() / "containers"
    return ["buildah", "--root", str(storage / "storage"), "--runroot", str(storage / "run"),
            "--storage-driver", "vfs", *args]


def buildah(*args: str) -> str:
    run = subprocess.run(buildah_command(*args), capture_output=True, text=True)
    assert run.returncode == 0, f"buildah {shlex.join(args)}:\n{run.stderr[-3000:]}"
    return run.stdout.strip()


def base_image() -> str:
    """A Debian bookworm image with python3 and its venv module, made once per machine."""
    name = f"localhost/kube-extender-test-base:{key(*MMDEBSTRAP)}"
    with locked("base-image"):
        if subprocess.run(buildah_command("inspect", "--type", "image", name), capture_output=True).returncode:
            with tempfile.TemporaryDirectory() as tmp:
                rootfs = Path(tmp) / "rootfs.tar"
                subprocess.run([*MMDEBSTRAP, str(rootfs)], check=True, capture_output=True)
                container = buildah("from", "scratch")
                buildah("add", container, str(rootfs), "/")
                buildah("config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                        "--cmd", "/bin/sh", container)
                buildah("commit", "--rm", container, name)
    return name


def remove_stale_images(age: float = 3600) -> None:
    """Test images of runs killed before their cleanup (those of a run in parallel are younger)."""
    for image in json.loads(buildah("images", "--json") or "[]"):
        if time.time() - image["created"] > age and any(
                name.startswith(f"{IMAGE}:") for name in image.get("names") or []):
            subprocess.run(buildah_command("rmi", "--force", image["id"]), capture_output=True)


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`make image` with buildah, a base image of our own and the wheels served on loopback."""
    require_tools()
    remove_stale_images()
    base = base_image()
    index = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(wheelhouse())))
    threading.Thread(target=index.serve_forever, daemon=True).start()
    name = f"{IMAGE}:{uuid.uuid4().hex[:12]}"
    build_args = ["--isolation", "chroot", "--network", "host", "--build-arg", f"BASE_IMAGE={base}",
                  "--build-arg", f"PIP_INSTALL_OPTIONS=--no-index --find-links http://127.0.0.1:{index.server_port}/"]
    log = tmp_path_factory.mktemp("image") / "build.log"
    try:
        with open(log, "wb") as out:
            built = subprocess.run(["make", "-s", "image", f"CONTAINER_ENGINE={shlex.join(buildah_command())}",
                                    f"IMAGE={name}", f"IMAGE_BUILD_ARGS={shlex.join(build_args)}"],
                                   cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        assert built.returncode == 0, log.read_text()[-4000:]
    finally:
        index.shutdown()
    try:
        yield name
    finally:
        subprocess.run(buildah_command("rmi", "--force", name), capture_output=True)


@pytest.fixture
def container(image: str) -> Iterator[tuple[str, Path]]:
    """A working container of the image and its root filesystem."""
    name = buildah("from", "--pull=never", image)
    try:
        yield name, Path(buildah("mount", name))
    finally:
        subprocess.run(buildah_command("rm", name), capture_output=True)


def image_config(image: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(buildah("inspect", "--type", "image", image))["OCIv1"]["config"]
    return config


def run_read_only(container: str, rootfs: Path, user: str, command: list[str]) -> list[str]:
    """The command line that runs ``command`` in ``container`` as ``user``, on the host's network,
    with its root filesystem read-only and tmpfs on /tmp and /run (module docstring). The files
    buildah bind-mounts over (/etc/hosts, hostname, resolv.conf) are made first where the image
    has none, as a container runtime makes them in the container's writable layer."""
    script = ('for f in hosts hostname resolv.conf; do [ -e "$1/etc/$f" ] || : > "$1/etc/$f"; done '
              '&& mount --bind "$1" "$1" && mount -t tmpfs -o mode=1777 tmpfs "$1/tmp" '
              '&& mount -t tmpfs -o mode=755 tmpfs "$1/run" && mount -o remount,bind,ro "$1" && shift && exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(rootfs),
            *buildah_command("run", "--isolation", "chroot", "--network", "host", "--user", user, container,
                             "--", *command)]


def descendants(root: int) -> dict[int, int]:
    """{pid: parent pid} of every process below ``root``."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
    found: dict[int, int] = {}
    frontier = [root]
    while frontier:
        pid = frontier.pop()
        children = {p: parent for p, parent in parents.items() if parent == pid}
        found.update(children)
        frontier += children
    return found


def argv(pid: int) -> list[str]:
    return (Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0"))


def ids(pid: int) -> dict[str, list[str]]:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {line.split(":")[0]: line.split()[1:] for line in status if line.startswith(("Uid:", "Gid:"))}


def test_image_runs_what_the_chart_runs_as_the_chart_user(image: str) -> None:
    config = image_config(image)
    security = VALUES["podSecurityContext"]
    assert config["Entrypoint"] == ["kube-extender"]  # the chart's command
    assert config["Cmd"][0] == "serve"  # the chart's args start with serve
    assert config["User"] == f"{security['runAsUser']}:{security['runAsGroup']}" == "65532:65532"
    assert "PYTHONDONTWRITEBYTECODE=1" in config["Env"]


def test_image_holds_the_installed_package_and_nothing_to_build_with(image: str,
                                                                    container: tuple[str, Path]) -> None:
    _, rootfs = container
    venv = rootfs / "opt" / "kube-extender"
    site = next(venv.glob("lib/python3*/site-packages"))
    assert (site / "extender" / "cluster" / "data" / "demo-cluster.yaml").is_file()
    assert (site / "policies").is_dir()
    assert not list(site.glob("__editable__*")) and not list(site.glob("*.egg-link")), "an editable install"
    assert not (rootfs / "src").exists(), "the sources stay in the build stage"
    assert not (site / "tests").exists()
    assert not (venv / "bin" / "pip").exists() and not (site / "pip").exists()
    assert not (site / "setuptools").exists()
    assert os.stat(site / "extender").st_uid == 0, "the code is not owned by the user it runs as"
    # Bytecode compiled at build time and valid whatever the copies did to mtimes (checked
    # against the source's hash): with a read-only root, a stale .pyc is compiled at every start.
    for source in (site / "extender").rglob("*.py"):
        (pyc,) = (source.parent / "__pycache__").glob(f"{source.stem}.cpython-*.pyc")
        header = pyc.read_bytes()[:16]
        assert int.from_bytes(header[4:8], "little") == 0b11, f"{pyc}: not checked-hash bytecode"
        assert header[8:16] == importlib.util.source_hash(source.read_bytes()), f"{pyc} is stale"


def test_image_serves_with_a_read_only_root_as_65532_and_exits_0_on_sigterm(
        image: str, container: tuple[str, Path], tmp_path: Path) -> None:
    name, rootfs = container
    config = image_config(image)
    probe = subprocess.run(run_read_only(name, rootfs, config["User"],
                                         ["python3", "-c", "open('/var/tmp/probe', 'w')"]),
                           capture_output=True, text=True)
    assert probe.returncode != 0 and "Read-only file system" in probe.stderr, probe.stderr[-2000:]

    port, log = free_port(), tmp_path / "serve.log"
    command = [*config["Entrypoint"], *config["Cmd"], "--host", "127.0.0.1", "--port", str(port)]
    with running(run_read_only(name, rootfs, config["User"], command), log) as proc:
        wait_ready(proc, port, log)
        check_serves_the_demo(port)
        # The venv's python running the console script: not buildah's chroot-exec wrapper above it.
        servers = {pid: parent for pid, parent in descendants(proc.pid).items()
                   if argv(pid)[:2] == ["/opt/kube-extender/bin/python3", "/opt/kube-extender/bin/kube-extender"]}
        assert len(servers) == 2, "gunicorn's master and its one worker"
        for pid in servers:
            assert ids(pid) == {"Uid": ["65532"] * 4, "Gid": ["65532"] * 4}, pid
        (master,) = (pid for pid, parent in servers.items() if parent not in servers)
        assert argv(master)[2:] == [*config["Cmd"], "--host", "127.0.0.1", "--port", str(port)]
        stop_cleanly(proc, log, master)
    text = log.read_text()
    assert "Read-only file system" not in text and "Permission denied" not in text, text[-3000:]


def test_a_derived_image_built_as_the_policy_guide_says_runs_the_plugin(image: str, tmp_path: Path) -> None:
    """docs/writing-a-policy.md's package and Dockerfile, built FROM this image the way `make
    image` builds it (same engine, same build arguments): the plugin is installed in the image's
    virtualenv, which still has no pip, and the image still runs as the chart runs it."""
    writes = [b for b, runs in blocks() if runs and "dedicated-nodes/" in b and file_writes(b)]
    for block in writes:
        subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, check=True)
    assert (tmp_path / "dedicated-nodes" / "Dockerfile").is_file()
    index = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(wheelhouse())))
    threading.Thread(target=index.serve_forever, daemon=True).start()
    derived = f"{IMAGE}:derived-{uuid.uuid4().hex[:12]}"
    try:
        build = subprocess.run(buildah_command(
            "build", "--isolation", "chroot", "--network", "host", "-t", derived,
            "--build-arg", f"KUBE_EXTENDER_IMAGE={image}",
            "--build-arg", f"PIP_INSTALL_OPTIONS=--no-index --find-links http://127.0.0.1:{index.server_port}/",
            "."), cwd=tmp_path / "dedicated-nodes", capture_output=True, text=True)
        assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
        assert "DedicatedNodes  (kube-extender-dedicated-nodes 0.1.0)" in build.stdout  # the build's own check
        config, base = image_config(derived), image_config(image)
        assert (config["User"], config["Entrypoint"], config["Cmd"]) == (base["User"], base["Entrypoint"], base["Cmd"])
        name = buildah("from", "--pull=never", derived)
        try:
            rootfs = Path(buildah("mount", name))
            site = next((rootfs / "opt" / "kube-extender").glob("lib/python3*/site-packages"))
            assert (site / "dedicated_nodes" / "plugin.py").is_file() and not (site / "pip").exists()
            listed = subprocess.run(run_read_only(name, rootfs, config["User"], ["kube-extender", "plugins", "--json"]),
                                    capture_output=True, text=True)
            assert listed.returncode == 0, listed.stderr[-2000:]
            plugin = {p["name"]: p for p in json.loads(listed.stdout)}["DedicatedNodes"]
            assert (plugin["package"], plugin["extensionPoints"]) == ("kube-extender-dedicated-nodes",
                                                                      ["filter", "score"])
        finally:
            subprocess.run(buildah_command("rm", name), capture_output=True)
    finally:
        index.shutdown()
        subprocess.run(buildah_command("rmi", "--force", derived), capture_output=True)
