# The kube-extender image, the one the Helm chart deploys. `make image` builds it with docker,
# podman or buildah, tagged ghcr.io/kube-extender/kube-extender:<package version>:
#
#   docker build -t ghcr.io/kube-extender/kube-extender:0.3.0 .
#
# Build arguments:
#   BASE_IMAGE           any image with python3 3.11+ and its venv module on PATH, used by both
#                        stages: your registry's copy of python:3.11-slim-bookworm, or Debian
#                        bookworm with python3 and python3-venv.
#   PIP_INSTALL_OPTIONS  options of the one `pip install`, for builds that cannot reach PyPI:
#                          a private index:  --index-url https://pypi.example.com/simple
#                          no index at all:  --no-index --find-links http://127.0.0.1:8000/
#                        For the second, make the wheels on a machine with the base's Python
#                        (`pip wheel --wheel-dir wheels . setuptools wheel`: the dependencies, and
#                        what building this package from source needs), serve them
#                        (`python3 -m http.server --bind 127.0.0.1 8000 --directory wheels`) and
#                        build with `--network host`. Nothing of pip's settings reaches the image.
#
# The image is the base plus one virtualenv, /opt/kube-extender: this package and its
# dependencies, without pip or setuptools. It runs as UID/GID 65532 (the chart's
# podSecurityContext) with a read-only root filesystem: it writes only temporary files to /tmp
# (gunicorn's worker heartbeat), where the chart mounts an emptyDir. The bytecode is compiled at
# build time, and PYTHONDONTWRITEBYTECODE keeps Python from trying to write more. gunicorn runs in
# the foreground as the container's first process: on SIGTERM it answers the requests in flight,
# the worker releases the leader lease (with leader election on), and it exits 0.

ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ARG PIP_INSTALL_OPTIONS=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
RUN python3 -m venv /opt/kube-extender
# Only what the package is built from (.dockerignore keeps the rest out of the context).
COPY pyproject.toml setup.cfg README.md LICENSE /src/
COPY extender /src/extender
COPY policies /src/policies
# A regular (not editable) install: the venv must not refer to /src, which stays in this stage.
# Bytecode is checked against a hash of the source, not its mtime: copying between stages may
# round mtimes, and a stale .pyc would be compiled again at every start (nothing can be cached
# on a read-only root).
RUN /opt/kube-extender/bin/pip install --no-compile ${PIP_INSTALL_OPTIONS} /src \
 && /opt/kube-extender/bin/pip uninstall --yes pip setuptools \
 && /opt/kube-extender/bin/python -m compileall -q -j 0 --invalidation-mode checked-hash /opt/kube-extender/lib \
 && /opt/kube-extender/bin/kube-extender --version

FROM ${BASE_IMAGE}
COPY --from=build /opt/kube-extender /opt/kube-extender
ENV PATH=/opt/kube-extender/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp
USER 65532:65532
EXPOSE 8888
# The chart runs `command: [kube-extender]` with its own `args: [serve, ...]`. Without arguments
# the image serves the embedded demo cluster on every address of the container (loopback, the
# default outside a container, cannot be reached through a published port):
#   docker run --rm -p 8888:8888 ghcr.io/kube-extender/kube-extender:0.3.0
ENTRYPOINT ["kube-extender"]
CMD ["serve", "--host", "0.0.0.0"]
