"""The one method registry: every operation trainee offers, registered once.

The registry is the daemon's only facade: the same table is served over JSON-RPC
on the Unix socket and ``POST /rpc``, as the HTTP tool API (``/api/tools``), to the
web page, the CLI (``trainee call``) and MCP; it is rendered as OpenAI-style
function schemas and as the OpenAPI document. A method is one async handler
taking a msgspec ``Params`` Struct and returning a msgspec ``Result`` (or any
JSON-able value). While the daemon shuts down every call but ``daemon_stop``
raises :class:`~trainee.errors.ShuttingDown`.
"""

from __future__ import annotations

import functools
import inspect
import math
import typing
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec

from trainee.api.context import CallContext
from trainee.errors import InvalidParams, MethodNotFound, ShuttingDown
from trainee.ids import IdError, canonical_session, parse_round
from trainee.spec.wire import ROUND_META, SESSION_META

P = TypeVar("P", bound=msgspec.Struct)
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

Handler = Callable[[Any, Any], Awaitable[Any]]

DURING_SHUTDOWN = frozenset({"daemon_stop"})
"""The methods still answered while the daemon shuts down (asking it to stop again)."""


@dataclass(frozen=True)
class Method(Generic[P]):
    """One registered method."""

    name: str
    handler: Handler
    params_type: type[msgspec.Struct]
    result_type: Any
    summary: str
    description: str

    def decode_params(self, raw: Any) -> Any:
        """Convert JSON-RPC params (object, array or absent) into ``params_type``.

        Strict: a name the method does not take is refused (every such name is
        listed), an int must be a JSON integer (``32.0`` is refused) of at most 64 bits,
        a float must be finite, and session and round ids are parsed by
        :mod:`trainee.ids` (a session into its canonical form, a round into its number).
        """
        if raw is None:
            raw = {}
        elif isinstance(raw, list):
            fields = self.params_type.__struct_fields__
            if len(raw) > len(fields):
                raise InvalidParams(
                    f"{self.name}: takes at most {len(fields)} positional params, got {len(raw)}",
                    {"method": self.name, "reason": "too many positional params"},
                )
            raw = dict(zip(fields, raw, strict=False))
        elif not isinstance(raw, dict):
            raise InvalidParams(
                f"{self.name}: params must be an object or an array",
                {"method": self.name, "reason": "params not structured"},
            )
        names = _field_names(self.params_type)
        unknown = [str(k) for k in raw if k not in names]
        if unknown:
            shown = ", ".join(repr(k[:64]) for k in unknown[:20])
            more = f" (and {len(unknown) - 20} more)" if len(unknown) > 20 else ""
            raise InvalidParams(
                f"{self.name}: unknown param(s) {shown}{more}; it takes "
                + (", ".join(sorted(names)) or "no params"),
                {"method": self.name, "reason": "unknown params", "unknown": unknown[:20]},
            )
        raw = self._parse_ids(raw)
        try:
            params = msgspec.convert(raw, type=self.params_type, str_keys=True)
        except msgspec.ValidationError as exc:
            raise InvalidParams(
                f"{self.name}: invalid params: {exc}",
                {"method": self.name, "reason": str(exc)},
            ) from None
        for name in self.params_type.__struct_fields__:
            value = getattr(params, name)
            if type(value) is int and not _INT_MIN <= value <= _INT_MAX:
                raise InvalidParams(
                    f"{self.name}: {name}: integer out of range (at most 64 bits)",
                    {"method": self.name, "field": name, "reason": "integer out of range"},
                )
            if type(value) is float and not math.isfinite(value):
                raise InvalidParams(
                    f"{self.name}: {name}: must be a finite number, got {value}",
                    {"method": self.name, "field": name, "reason": "not finite"},
                )
        return params

    def _parse_ids(self, raw: dict[str, Any]) -> dict[str, Any]:
        """``raw`` with its rounds (``RoundRef``) as ints and its sessions (``SessionRef``)
        canonical, parsed by :mod:`trainee.ids` (every accepted form, a JSON integer too)."""
        parsers = (
            (ROUND_META, parse_round, "bad round number"),
            (SESSION_META, canonical_session, "bad session id"),
        )
        out = raw
        for meta, parse, reason in parsers:
            for name in _marked_fields(self.params_type, meta):
                if out.get(name) is None:
                    continue
                try:
                    value = parse(out[name])
                except IdError as exc:
                    where = "" if name in ("round", "session") else f" (at {name})"
                    raise InvalidParams(
                        f"{self.name}: invalid params: {exc.message}{where}",
                        {"method": self.name, "field": name, "reason": reason},
                    ) from None
                out = out if out is not raw else dict(raw)
                out[name] = value
        return out

    def params_schema(self) -> dict[str, Any]:
        """JSON schema of the params, inlined (no $ref) so tool callers can read it."""
        schema = _inline_schema(msgspec.json.schema(self.params_type))
        if schema.get("type") == "object":
            schema["additionalProperties"] = False
        return schema

    def result_schema(self) -> dict[str, Any]:
        return _inline_schema(msgspec.json.schema(self.result_type))

    def tool_schema(self) -> dict[str, Any]:
        """The OpenAI-style function schema of this method; its description ends with
        the fields of the result (``Returns: ...``)."""
        returns = _returns_line(self.result_schema())
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.summary
                + (f"\n\n{self.description}" if self.description else "")
                + (f"\n\n{returns}" if returns else ""),
                "parameters": self.params_schema(),
            },
        }


class Registry:
    """The table of methods, in registration order."""

    def __init__(self) -> None:
        self._methods: dict[str, Method[Any]] = {}
        self._schemas: tuple[int, bytes] | None = None

    def method(
        self,
        params: type[msgspec.Struct],
        result: Any,
        *,
        name: str | None = None,
    ) -> Callable[[F], F]:
        """Register ``handler(ctx, params)``; its docstring is the method's documentation."""

        def register(handler: F) -> F:
            method_name = name or handler.__name__
            if method_name in self._methods:
                raise ValueError(f"method {method_name!r} registered twice")
            doc = inspect.cleandoc(handler.__doc__ or "").strip()
            if not doc:
                raise ValueError(f"method {method_name!r} has no docstring")
            summary, _, rest = doc.partition("\n\n")
            self._methods[method_name] = Method(
                name=method_name,
                handler=handler,
                params_type=params,
                result_type=result,
                summary=" ".join(summary.split()),
                description=rest.strip(),
            )
            return handler

        return register

    def get(self, name: str) -> Method[Any]:
        try:
            return self._methods[name]
        except KeyError:
            raise MethodNotFound(
                f"Method not found: {name}", {"method": name, "known": sorted(self._methods)}
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._methods

    def __iter__(self) -> Iterator[Method[Any]]:
        return iter(self._methods.values())

    def names(self) -> list[str]:
        return list(self._methods)

    async def call(self, name: str, raw_params: Any, ctx: CallContext) -> Any:
        """Decode ``raw_params`` strictly and run the method (ShuttingDown while the
        daemon stops, except :data:`DURING_SHUTDOWN`)."""
        method = self.get(name)
        if ctx.services.closing and name not in DURING_SHUTDOWN:
            raise ShuttingDown(
                f"the daemon is shutting down: {name} was not run; "
                "call it again once a daemon is running",
                {"method": name, "hint": "trainee daemon start"},
            )
        params = method.decode_params(raw_params)
        return await method.handler(ctx, params)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """Every method's function schema (built once: the table does not change after
        start-up; a copy each call, so callers may change theirs)."""
        if self._schemas is None or self._schemas[0] != len(self._methods):
            self._schemas = (len(self._methods), msgspec.json.encode(self.fresh_tool_schemas()))
        return list(msgspec.json.decode(self._schemas[1]))

    def fresh_tool_schemas(self) -> list[dict[str, Any]]:
        return [m.tool_schema() for m in self]


def _field_names(struct: type[msgspec.Struct]) -> frozenset[str]:
    """The wire names of a Params Struct's fields (renames applied)."""
    return frozenset(getattr(struct, "__struct_encode_fields__", struct.__struct_fields__))


@functools.cache
def _marked_fields(struct: type[msgspec.Struct], meta: msgspec.Meta) -> tuple[str, ...]:
    """The fields of a Params Struct typed ``SessionRef`` / ``RoundRef`` (``meta``),
    or ``... | None``."""
    hints = typing.get_type_hints(struct, include_extras=True)

    def marked(hint: Any) -> bool:
        return meta in getattr(hint, "__metadata__", ()) or any(
            marked(arg) for arg in typing.get_args(hint)
        )

    return tuple(name for name in struct.__struct_fields__ if marked(hints.get(name)))


def _returns_line(schema: dict[str, Any]) -> str:
    """``Returns: a, b, c.`` for a result with named fields (a list of them too)."""
    what = ""
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        schema, what = schema["items"], "a list of "
    props = schema.get("properties")
    if schema.get("type") != "object" or not props:
        return ""
    return f"Returns: {what}{', '.join(props)}."


def _inline_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Replace ``$ref`` pointers into ``$defs`` by the definitions themselves."""
    defs: dict[str, Any] = schema.get("$defs", {})

    def resolve(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                key = ref.removeprefix("#/$defs/")
                if key in seen:  # recursive type: keep it open rather than loop
                    return {"type": "object"}
                return resolve(defs[key], (*seen, key))
            return {k: resolve(v, seen) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [resolve(v, seen) for v in node]
        return node

    resolved = resolve(schema, ())
    assert isinstance(resolved, dict)
    if resolved.get("type") == "object":
        resolved.setdefault("properties", {})
    return resolved
