"""``docs/openapi.yaml`` as a checker: what the document says an answer to (method, path, status)
is, held against a real answer. The unit tests hold it against the app's routes and the Flask
test client's answers, the wire fuzz against every answer of the real server, so the document
cannot drift from what the server does."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

DOC = Path(__file__).resolve().parents[1] / "docs" / "openapi.yaml"
_URI = "urn:kube-extender:openapi"


def _pointer(*parts: str) -> str:
    return "#/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


class OpenApi:
    def __init__(self, path: Path = DOC) -> None:
        self.doc: dict[str, Any] = yaml.safe_load(path.read_text())
        self.registry: Registry[Any] = Registry().with_resource(_URI, DRAFT202012.create_resource(self.doc))
        self.routes = [(re.compile("[^/]+".join(map(re.escape, re.split(r"\{[^}/]+\}", t))) + "$"), t)
                       for t in self.doc["paths"]]
        self._validators: dict[str, Draft202012Validator] = {}

    def route(self, path: str) -> str | None:
        """The document's path template of ``path`` (no query string); None if it has none."""
        return next((t for pattern, t in self.routes if pattern.match(path)), None)

    def response(self, method: str, target: str, status: int) -> tuple[str, dict[str, Any]] | None:
        """(pointer, response object) the document gives for this answer (its status, else its
        ``4XX``-style range, else ``default``); None if it gives none. A path or method it does not
        know answers as its ``HttpError`` response says (404, 405)."""
        template = self.route(target.split("?")[0])
        operation = self.doc["paths"][template].get(method.lower()) if template else None
        if operation is None:
            return _pointer("components", "responses", "HttpError"), self.doc["components"]["responses"]["HttpError"]
        key = next((k for k in (str(status), f"{status // 100}XX", "default") if k in operation["responses"]), None)
        if key is None:
            return None
        pointer, response = _pointer("paths", template or "", method.lower(), "responses", key), \
            operation["responses"][key]
        if "$ref" in response:
            pointer = response["$ref"]
            response = self.resolve(pointer)
        return pointer, response

    def resolve(self, pointer: str) -> Any:
        node: Any = self.doc
        for part in pointer.removeprefix("#/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def validator(self, pointer: str) -> Draft202012Validator:
        if pointer not in self._validators:
            self._validators[pointer] = Draft202012Validator({"$ref": _URI + pointer}, registry=self.registry)
        return self._validators[pointer]

    def problems(self, method: str, target: str, status: int, content_type: str, body: bytes) -> list[str]:
        """What is wrong with this answer by the document (empty: nothing)."""
        where = f"{method} {target.split('?')[0]} {status}"
        found = self.response(method, target, status)
        if found is None:
            return [f"{where}: the document gives no such answer"]
        pointer, response = found
        media = content_type.split(";")[0].strip()
        if media not in response.get("content", {}):
            return [f"{where}: the document gives no {media!r} answer"]
        if media != "application/json":
            return []
        schema = f"{pointer}/content/{media.replace('/', '~1')}/schema"
        errors = sorted(self.validator(schema).iter_errors(json.loads(body)), key=lambda e: list(e.path))
        return [f"{where}: {'/'.join(map(str, e.path)) or '<root>'}: {e.message[:200]}" for e in errors[:3]]
