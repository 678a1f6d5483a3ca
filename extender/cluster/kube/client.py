"""KubeClient: raw-dict REST calls over the official client's configuration, auth and transport.

The generated API classes build pydantic models for every object, which costs memory and time
for 150,000 pods and a watch stream; we keep what the client does well (kubeconfig / in-cluster
credentials, TLS, bearer-token refresh, connection pooling) and speak JSON ourselves.

    client = KubeClient.from_kubeconfig("~/.kube/config")    # or KubeClient.in_cluster()
    pod = client.get("/api/v1/namespaces/ml/pods/trainer-0")

Every request carries ``User-Agent: kube-extender/<version>`` unless another ``user_agent`` is
given, so the API server's audit log (and a test server's request log) can tell the extender's
reads, watches and writes from everybody else's.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

import orjson
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


class KubeClient:
    def __init__(self, api_client: k8s.ApiClient, *, timeout: float = 30.0,
                 user_agent: str = DEFAULT_USER_AGENT) -> None:
        """``user_agent`` becomes the ``api_client``'s User-Agent (the client is this object's
        from now on: do not share one ApiClient between KubeClients with different agents)."""
        self.api_client = api_client
        self.timeout = timeout
        self.user_agent = user_agent
        api_client.user_agent = user_agent

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None, *,
                        user_agent: str = DEFAULT_USER_AGENT) -> KubeClient:
        configuration = k8s.Configuration()
        k8s_config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
        return cls(k8s.ApiClient(configuration), user_agent=user_agent)

    @classmethod
    def in_cluster(cls, *, user_agent: str = DEFAULT_USER_AGENT) -> KubeClient:
        configuration = k8s.Configuration()
        k8s_config.load_incluster_config(client_configuration=configuration)
        return cls(k8s.ApiClient(configuration), user_agent=user_agent)

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    def _send(self, method: str, path: str, *, query: Mapping[str, Any] | None = None, body: Any = None,
              content_type: str = "application/json", timeout: float | tuple[float, float] | None = None) -> Any:
        params: Sequence[tuple[str, Any]] = [(k, v) for k, v in (query or {}).items() if v is not None]
        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            prepared = self.api_client.param_serialize(method, path, query_params=list(params),
                                                       header_params=headers, body=body,
                                                       auth_settings=["BearerToken"])
            return self.api_client.call_api(*prepared, _request_timeout=timeout or self.timeout)
        except k8s.ApiException as exc:
            raise ApiError(exc.status or 0, str(exc.reason or exc)) from exc
        except OSError as exc:
            raise ApiError(0, f"{type(exc).__name__}: {exc}") from exc
        except Exception as exc:  # urllib3 errors are not OSErrors in every version
            if type(exc).__module__.startswith("urllib3"):
                raise ApiError(0, f"{type(exc).__name__}: {exc}") from exc
            raise

    def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None, body: Any = None,
                content_type: str = "application/json") -> Any:
        """Send and decode the JSON answer; raises ApiError for any non-2xx answer."""
        response = self._send(method, path, query=query, body=body, content_type=content_type)
        try:
            data = response.read()
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
            data = response.response.read()
            response.response.release_conn()
            raise _error_of(response.status, data)
        return WatchStream(response.response)


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
