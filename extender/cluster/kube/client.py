"""KubeClient: raw-dict REST calls over the official client's configuration, auth and transport.

The generated API classes build pydantic models for every object, which costs memory and time
for 150,000 pods and a watch stream; we keep what the client does well (kubeconfig / in-cluster
credentials, TLS, bearer-token refresh, its urllib3 connection pool, proxies) and speak JSON
ourselves: a request is the configuration's credentials header, a body encoded once with orjson,
and one ``urlopen`` on the API server's connection pool (on the pool manager, through a proxy).
The generated ``ApiClient.call_api`` path walked every body to "sanitize" it, encoded it with
the standard ``json`` module and matched the content type with regular expressions, and the
pool manager parsed the URL and looked its pool up again: together about a third of the
client's CPU per request, for nothing.

    client = KubeClient.from_kubeconfig("~/.kube/config")    # or KubeClient.in_cluster()
    pod = client.get("/api/v1/namespaces/ml/pods/trainer-0")

**Connections.** The pool keeps up to ``connections`` idle keep-alive connections to the API
server (the Kubernetes client's default is 5 per CPU); a request that finds none idle opens one,
and one returned to a full pool is closed (urllib3 warns "Connection pool is full"). Size it for
the requests in flight at once (``extender.app.api_connections``): a bind is one write, and
kube-scheduler keeps many binds in flight.

Every request carries ``User-Agent: kube-extender/<version>`` unless another ``user_agent`` is
given, so the API server's audit log (and a test server's request log) can tell the extender's
reads, watches and writes from everybody else's.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping
from urllib.parse import quote

import orjson
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from extender import __version__

DEFAULT_USER_AGENT = f"kube-extender/{__version__}"


class ApiError(Exception):
    """A non-2xx answer. ``status`` is the HTTP code (0: no answer), ``reason`` the Status reason."""

    def __init__(self, status: int, message: str, reason: str = "", body: Any = None) -> None:
        super().__init__(f"{status} {reason}: {message}" if reason else f"{status}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body


def _error_of(status: int, data: bytes) -> ApiError:
    try:
        body = orjson.loads(data) if data else {}
    except orjson.JSONDecodeError:
        body = {"message": data[:200].decode(errors="replace")}
    if not isinstance(body, dict):
        body = {"message": str(body)}
    return ApiError(status, str(body.get("message") or ""), str(body.get("reason") or ""), body)


def _query(params: Mapping[str, Any]) -> str:
    """``k=v&...`` as the Kubernetes client writes a query (values percent-encoded, booleans in
    lower case); None values are left out."""
    return "&".join(f"{k}={quote(str(v).lower() if isinstance(v, bool) else str(v))}"
                    for k, v in params.items() if v is not None)


class KubeClient:
    def __init__(self, api_client: k8s.ApiClient, *, timeout: float = 30.0,
                 user_agent: str = DEFAULT_USER_AGENT) -> None:
        """``user_agent`` becomes the ``api_client``'s User-Agent (the client is this object's
        from now on: do not share one ApiClient between KubeClients with different agents).
        KubeClients sharing one ApiClient share its connection pool."""
        self.api_client = api_client
        self.timeout = timeout
        self.user_agent = user_agent
        api_client.user_agent = user_agent
        self._configuration = api_client.configuration
        self._pool = api_client.rest_client.pool_manager
        base = str(self._configuration.host).rstrip("/")
        self._urlopen: Callable[..., Any]
        if type(self._pool) is urllib3.PoolManager:
            # straight to the API server's connection pool: the manager would parse the URL and
            # look the pool up again for every request (a fifth of the client's CPU per request)
            self._urlopen = self._pool.connection_from_url(base).urlopen
            self._prefix = urllib3.util.parse_url(base).path or ""
        else:  # through a proxy, the manager writes the request as the proxy wants it
            self._urlopen, self._prefix = self._pool.urlopen, base
        self._timeout = urllib3.Timeout(total=timeout)

    @staticmethod
    def _configured(configuration: k8s.Configuration, connections: int | None) -> k8s.ApiClient:
        if connections is not None:
            configuration.connection_pool_maxsize = connections
        return k8s.ApiClient(configuration)

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None, *,
                        user_agent: str = DEFAULT_USER_AGENT, connections: int | None = None) -> KubeClient:
        """``connections``: idle connections the pool keeps (see the module docstring; None: the
        Kubernetes client's default)."""
        configuration = k8s.Configuration()
        k8s_config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
        return cls(cls._configured(configuration, connections), user_agent=user_agent)

    @classmethod
    def in_cluster(cls, *, user_agent: str = DEFAULT_USER_AGENT, connections: int | None = None) -> KubeClient:
        configuration = k8s.Configuration()
        k8s_config.load_incluster_config(client_configuration=configuration)
        return cls(cls._configured(configuration, connections), user_agent=user_agent)

    @property
    def host(self) -> str:
        return str(self._configuration.host)

    @property
    def connections(self) -> int:
        """Idle connections the pool keeps per host."""
        return int(self._pool.connection_pool_kw.get("maxsize", 1))

    def _headers(self, content_type: str) -> dict[str, str]:
        """The request's headers: JSON both ways, the client's default headers (User-Agent) and
        the credentials' header, read from the configuration for every request (its refresh
        hook renews an expiring token, as the generated client does)."""
        headers = {"Accept": "application/json", "Content-Type": content_type, **self.api_client.default_headers}
        for setting in self._configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        return headers

    def _send(self, method: str, path: str, *, query: Mapping[str, Any] | None = None, body: Any = None,
              content_type: str = "application/json", timeout: tuple[float, float] | None = None) -> Any:
        """One request; the urllib3 response, its body not read yet. ``timeout``: (connect,
        read) seconds instead of the client's total timeout. A failure to get an answer at all
        raises ApiError with status 0. A POST or PATCH (a Binding, an eviction, a patch of a pod)
        is sent once, within its timeout, so a leader's write checked against its fence never
        lands later than the fence allows (urllib3's retry after a connect timeout would start the
        timeout again); the idempotent methods keep the transport's retries (a Lease's PUT
        carries its resourceVersion: a late one is refused)."""
        params = _query(query or {})
        url = f"{self._prefix}{path}?{params}" if params else self._prefix + path
        try:
            return self._urlopen(method, url, body=None if body is None else orjson.dumps(body),
                                 headers=self._headers(content_type), preload_content=False,
                                 timeout=self._timeout if timeout is None else urllib3.Timeout(*timeout),
                                 retries=False if method in ("POST", "PATCH") else None)
        except (OSError, urllib3.exceptions.HTTPError) as exc:  # urllib3's are not OSErrors in every version
            raise ApiError(0, f"{type(exc).__name__}: {exc}") from exc

    def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None, body: Any = None,
                content_type: str = "application/json") -> Any:
        """Send and decode the JSON answer; raises ApiError for any non-2xx answer."""
        response = self._send(method, path, query=query, body=body, content_type=content_type)
        try:
            data = response.data
        except Exception as exc:  # noqa: BLE001 - a broken connection while reading
            raise ApiError(0, f"reading the answer failed: {exc}") from exc
        if not 200 <= response.status < 300:
            raise _error_of(response.status, data)
        return orjson.loads(data) if data else None

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body=body)

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body=body)

    def merge_patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, body=body, content_type="application/merge-patch+json")

    def list_pages(self, path: str, *, page_size: int = 500, **query: Any) -> Iterator[tuple[list[dict[str, Any]], str]]:
        """The items of a collection page by page, each with the list's resourceVersion (that of
        the first page), so a caller can apply a page and let it go before the next arrives."""
        token: str | None = None
        rv = ""
        while True:
            page = self.get(path, limit=page_size, **{"continue": token}, **query)
            meta = page.get("metadata") or {}
            rv = rv or str(meta.get("resourceVersion") or "")
            token = meta.get("continue") or None
            yield page.get("items") or [], rv
            if not token:
                return

    def watch(self, path: str, *, resource_version: str, timeout_seconds: int, **query: Any) -> WatchStream:
        """Open a watch; iterate the returned stream for events (``{"type", "object"}``) until the
        server ends it. A 410 arrives as an ``ERROR`` event; a non-2xx answer raises ApiError.
        ``close()`` (from any thread) ends the iteration."""
        response = self._send("GET", path, query={"watch": "true", "resourceVersion": resource_version,
                                                  "timeoutSeconds": timeout_seconds, "allowWatchBookmarks": "true",
                                                  **query}, timeout=(10.0, timeout_seconds + 30.0))
        if not 200 <= response.status < 300:
            data = response.read()
            response.release_conn()
            raise _error_of(response.status, data)
        return WatchStream(response)


class WatchStream:
    """The events of one watch response, decoded line by line."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        buffer = b""
        try:
            for chunk in self._raw.stream(65536, decode_content=True):
                buffer += chunk
                while True:
                    line, sep, rest = buffer.partition(b"\n")
                    if not sep:
                        break
                    buffer = rest
                    if line.strip():
                        yield orjson.loads(line)
            if buffer.strip() and not self._closed:
                yield orjson.loads(buffer)
        except Exception:
            if self._closed:
                return
            raise
        finally:
            self.close()

    def close(self) -> None:
        """Stop reading: shuts the socket down so a blocked read in another thread returns."""
        if self._closed:
            return
        self._closed = True
        try:
            sock = getattr(getattr(self._raw, "_fp", None), "fp", None)
            raw_sock = getattr(sock, "raw", None)
            inner = getattr(raw_sock, "_sock", None)
            if inner is not None:
                import socket
                inner.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._raw.close()
        except Exception:  # noqa: BLE001 - closing a response another thread reads may race
            pass
