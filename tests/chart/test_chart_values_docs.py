"""Every value is documented (``# --``, helm-docs style), typed in values.schema.json and listed in
the chart README. ``python tests/chart/test_chart_values_docs.py`` rewrites the README's values table.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml
from chart_kit import CHART


def value_lines() -> list[tuple[str, int, bool]]:
    """(dotted key, line index, is a leaf) for every key of values.yaml, from its text."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    out: list[tuple[str, int, bool]] = []
    stack: list[tuple[int, str]] = []
    key_re = re.compile(r"^(\s*)([A-Za-z][A-Za-z0-9]*):(.*)$")
    for n, line in enumerate(lines):
        m = key_re.match(line)
        if not m:
            continue
        indent, key, rest = len(m.group(1)), m.group(2), m.group(3).strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [key])
        following = [x for x in lines[n + 1:] if x.strip() and not x.strip().startswith("#")][:1]
        leaf = bool(rest) or not following or len(following[0]) - len(following[0].lstrip()) <= indent
        out.append((path, n, leaf))
        stack.append((indent, key))
    return out


def documented_values() -> list[tuple[str, str, str, str]]:
    """(key, type, default, description) of every `# --` documented value, in file order."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    data = yaml.safe_load("\n".join(lines))
    rows = []
    for path, n, _leaf in value_lines():
        comment = lines[n - 1].strip() if n else ""
        if not comment.startswith("# --"):
            continue
        value: Any = data
        for part in path.split("."):
            value = value[part]
        kind = {bool: "bool", int: "int", str: "string", list: "list", dict: "object"}.get(type(value), "")
        default = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else f'"{value}"'
        rows.append((path, kind, default, comment.removeprefix("# --").strip()))
    return rows


def values_table() -> str:
    head = "| Key | Type | Default | Description |\n|-----|------|---------|-------------|\n"
    rows = []
    for key, kind, default, desc in documented_values():
        cells = [f"`{key}`", kind, f"`{default}`", desc]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |\n")
    return head + "".join(rows)


def test_every_value_is_documented() -> None:
    """helm-docs style: every leaf value has a `# --` comment right above it (values under a
    documented free-form object, like resources, are part of that object's default)."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    documented = {p for p, n, _ in value_lines() if n and lines[n - 1].strip().startswith("# --")}
    missing = [p for p, _, leaf in value_lines() if leaf and not any(p == d or p.startswith(d + ".") for d in documented)]
    assert not missing, f"values without a `# --` comment: {missing}"


def test_schema_covers_every_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        ref = node.get("$ref")
        return schema["definitions"][ref.rsplit("/", 1)[1]] if ref else node

    def walk(value: Any, node: dict[str, Any], path: str) -> None:
        node = resolve(node)
        assert "type" in node, f"{path}: no type in the schema"
        if isinstance(value, dict) and "properties" in node:
            assert node.get("additionalProperties") is False, f"{path}: typos would pass"
            for key, sub in value.items():
                assert key in node["properties"], f"{path}.{key} is not in values.schema.json"
                walk(sub, node["properties"][key], f"{path}.{key}")

    walk(yaml.safe_load((CHART / "values.yaml").read_text()), schema, "")


def test_chart_readme_lists_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    begin, end = "<!-- values:begin -->\n", "<!-- values:end -->"
    assert begin in readme and end in readme
    current = readme.split(begin, 1)[1].split(end, 1)[0]
    assert current == values_table(), "the values table is stale: run `python tests/chart/test_chart_values_docs.py`"


if __name__ == "__main__":  # rewrite the values table of the chart README
    readme_path = CHART / "README.md"
    text = readme_path.read_text()
    head, rest = text.split("<!-- values:begin -->\n", 1)
    _, tail = rest.split("<!-- values:end -->", 1)
    readme_path.write_text(f"{head}<!-- values:begin -->\n{values_table()}<!-- values:end -->{tail}")
    print(f"wrote {readme_path}")
