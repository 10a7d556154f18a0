"""The configuration reference (``docs/configuration.md``), generated from ``Settings``.

``python -m tests.config_reference > docs/configuration.md`` writes it;
tests/test_readme_reference.py fails when the file and the settings differ.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from sidecar.settings import Settings

HEADER = """# Configuration reference

Every setting of `sidecar run` (and of the commands that take `--config`),
generated from the settings model itself, so it lists exactly what the
service accepts. Where each value comes from, first source winning: arguments
in code, `SIDECAR_*` variables (nested fields joined by `__`), the secrets
directory named by `SIDECAR_SECRETS_DIR` (one file per field, named like the
variable), then the YAML file. A `SIDECAR_*` variable for a list holds
JSON (`SIDECAR_REDACTION__PATTERNS='["email","card_number"]'`). Numbers are
finite. `kafka.bootstrap_servers` is `host:port` entries separated by commas,
and topic names are Kafka's: 1 to 249 letters, digits, `.`, `_` or `-`. A bad
value stops start-up with one line naming the field (exit code 2). The
README's Configuration section explains the common ones with an example.

| setting | environment variable | type | default | limits |
|---|---|---|---|---|
"""


def _type(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation)
    for noise in ("typing.", "pathlib.", "pydantic.types.", "sidecar."):
        text = text.replace(noise, "")
    return text.replace("|", "\\|")


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value: Any = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "(required)"
    else:
        value = info.default
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, tuple | frozenset | set):
        value = list(value)
    text = json.dumps(value, default=str)
    return f"`{text}`".replace("|", "\\|")


_BOUNDS = {
    "ge": ">=",
    "gt": ">",
    "le": "<=",
    "lt": "<",
    "min_length": "length >=",
    "max_length": "length <=",
}


def _limits(info: FieldInfo) -> str:
    found = []
    for item in info.metadata:
        for name, sign in _BOUNDS.items():
            value = getattr(item, name, None)
            if value is not None:
                found.append(f"{sign} {value}")
    return ", ".join(found)


def leaves(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from leaves(annotation, f"{path}.")
        else:
            yield path, info


def render() -> str:
    lines = [HEADER.rstrip("\n")]
    for path, info in leaves(Settings):
        variable = "SIDECAR_" + path.replace(".", "__").upper()
        lines.append(
            f"| `{path}` | `{variable}` | {_type(info.annotation)} | {_default(info)} "
            f"| {_limits(info)} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
