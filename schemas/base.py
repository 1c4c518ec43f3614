"""The one place stored and wire records are decoded: versioned, strict, orjson-encoded.

Every record carries `schema_version`. Decoding a newer version than this code knows is refused
(the writer is ahead of us; never guess); an older one is upgraded by the registered migrations,
one step at a time, before strict validation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, ClassVar, Self

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from wakeful.core.errors import DecodeError, UnknownSchemaVersion

Migration = Callable[[dict[str, Any]], dict[str, Any]]

# (record kind, from_version) -> function returning the record at from_version + 1.
_MIGRATIONS: dict[tuple[str, int], Migration] = {}


def migration(kind: str, from_version: int) -> Callable[[Migration], Migration]:
    """Register the upgrade of one record kind from `from_version` to the next version."""

    def register(fn: Migration) -> Migration:
        key = (kind, from_version)
        if key in _MIGRATIONS:
            raise RuntimeError(f"two migrations registered for {kind} v{from_version}")
        _MIGRATIONS[key] = fn
        return fn

    return register


def dumps_any_int(doc: Any, *, sort_keys: bool = False) -> bytes:
    """Compact JSON like orjson's, for data from outside that may hold integers past 64 bits (which
    orjson refuses): those are written by the standard library's encoder in the same form.
    Raises ValueError only for an integer too long for Python to print (over 4300 digits)."""
    try:
        return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS if sort_keys else None)
    except TypeError:
        return json.dumps(doc, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False).encode()


class Record(BaseModel):
    """Base of every stored or wire record: strict, immutable, no unknown fields."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", populate_by_name=True)

    KIND: ClassVar[str]
    SCHEMA: ClassVar[int]

    schema_version: int

    def encode(self) -> bytes:
        # pydantic's serializer writes the JSON itself, byte for byte what orjson writes of
        # model_dump(mode="json"), in half the time: no dict of Python objects in between.
        return self.__pydantic_serializer__.to_json(self, by_alias=True)

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        # Fast path, one parse: what encode() wrote at the current version starts with its version.
        if raw.startswith(b'{"schema_version":%d,' % cls.SCHEMA):
            try:
                record = cls.model_validate_json(raw)
            except ValidationError:
                pass  # the full path below says exactly what is wrong
            else:
                if record.schema_version == cls.SCHEMA:  # not overridden by a repeated key
                    return record
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise DecodeError(cls.KIND, raw, f"not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise DecodeError(cls.KIND, raw, "not a JSON object")
        migrated = upgrade(cls.KIND, cls.SCHEMA, data, raw)
        try:
            return cls.model_validate_json(raw if migrated is data else orjson.dumps(migrated))
        except TypeError as exc:  # a migration produced something JSON cannot hold
            raise DecodeError(cls.KIND, raw, f"cannot upgrade: {exc}") from exc
        except ValidationError as exc:
            raise DecodeError(cls.KIND, raw, first_errors(exc)) from exc


def upgrade(kind: str, current: int, data: dict[str, Any], raw: bytes) -> dict[str, Any]:
    """Bring a decoded record to `current`; returns `data` itself when it is current already."""
    version = data.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise DecodeError(kind, raw, f"schema_version is {version!r}, expected a positive integer")
    if version > current:
        raise UnknownSchemaVersion(kind, version, current, raw)
    while version < current:
        step = _MIGRATIONS.get((kind, version))
        if step is None:
            raise DecodeError(kind, raw, f"no migration registered from {kind} v{version}")
        try:
            data = step(dict(data))
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise DecodeError(kind, raw, f"cannot upgrade from v{version}: {exc!r}") from exc
        version += 1
        data["schema_version"] = version
    return data


def first_errors(exc: ValidationError, limit: int = 3) -> str:
    parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:limit]]
    more = exc.error_count() - limit
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def cut(text: str, chars: int) -> str:
    """text, or its first `chars` characters and how many were left out: stored text that quotes
    outside input (a reason, an id) stays bounded whatever the input was."""
    if len(text) <= chars:
        return text
    return f"{text[:chars]}... ({len(text) - chars} more characters)"
