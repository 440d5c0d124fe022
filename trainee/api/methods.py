"""The registry's methods. Each is one async handler; its docstring is its documentation."""

from __future__ import annotations

import itertools
import os
from typing import Any

import anyio
import msgspec

import trainee
from trainee import events as ev
from trainee import states
from trainee.api.context import CallContext
from trainee.api.registry import Registry
from trainee.errors import InvalidParams, InvalidState, LimitExceeded, NotFound
from trainee.policies import POLICIES, needs_provider
from trainee.session.bus import chunks, wire_event
from trainee.spec import wire as w

registry = Registry()

_watch_ids = itertools.count(1)
MAX_NOTE_BYTES = 64 * 1024
MAX_WATCHES = 32
"""Watches one connection may hold at once (each holds a bounded queue of events)."""


# -- daemon --------------------------------------------------------------------


@registry.method(w.NoParams, w.HelloResult)
async def daemon_hello(ctx: CallContext, params: w.NoParams) -> w.HelloResult:
    """Identify the daemon: version, API version, pid and the methods it can serve.

    Clients call this first; ``capabilities`` lists the methods of this version,
    ``states`` the statuses and stop reasons (what is finished, what each reason ends
    as; the page reads them from here), ``policies`` each decision policy and whether
    it needs an LLM provider.
    """
    s = ctx.services
    return w.HelloResult(
        name="trainee",
        version=trainee.__version__,
        api_version=trainee.API_VERSION,
        pid=os.getpid(),
        started_at=s.started_at,
        socket=s.socket_path,
        http_url=s.http_url,
        project_root=str(s.project_root) if s.project_root else None,
        capabilities=registry.names(),
        states=msgspec.convert(states.published(), w.PublishedStates),
        policies={name: needs_provider(name) for name in POLICIES},
    )


@registry.method(w.NoParams, w.StopDaemonResult)
async def daemon_stop(ctx: CallContext, params: w.NoParams) -> w.StopDaemonResult:
    """Ask the daemon to shut down gracefully.

    Running sessions checkpoint; training rounds keep running under their
    monitors and are re-adopted by the next daemon.
    """
    ctx.services.request_shutdown()
    return w.StopDaemonResult(stopping=True)


@registry.method(w.ToolsListParams, list[dict[str, Any]])
async def tools_list(ctx: CallContext, params: w.ToolsListParams) -> list[dict[str, Any]]:
    """Return the OpenAI-style function schema of every method (or only ``name``).

    Each entry is ``{"type": "function", "function": {name, description,
    parameters}}`` with a JSON schema of the method's params.
    """
    if params.name is not None:
        return [registry.get(params.name).tool_schema()]
    return registry.tool_schemas()


@registry.method(w.NoParams, dict[str, Any])
async def openapi_get(ctx: CallContext, params: w.NoParams) -> dict[str, Any]:
    """Return the OpenAPI 3.1 document of the HTTP API, generated from this registry.

    Also ``GET /api/openapi.json``: every method as ``POST /api/tools/{name}`` with
    its params and result schemas, the URLs that are methods too, the event stream
    and ``/rpc``.
    """
    from trainee.api.openapi import build_openapi

    return build_openapi(registry)


# -- events --------------------------------------------------------------------


@registry.method(w.EventsWatchParams, w.EventsWatchResult)
async def events_watch(ctx: CallContext, params: w.EventsWatchParams) -> w.EventsWatchResult:
    """Stream events as ``events`` notifications on this connection.

    Events after ``since`` (an event id; omit it for live events only) are sent
    first, then live ones, each notification carrying ``{"events": [...]}`` in
    batches. A notification ``{"gap": true}`` says events were dropped (the
    watcher fell behind or asked for ones no longer retained): watch again from
    the last id received. Only over the Unix socket; over HTTP use SSE. A connection
    holds at most 32 watches at once.
    """
    if ctx.notify is None or ctx.start_soon is None:
        raise InvalidState(
            "events_watch streams over the Unix socket only; over HTTP use "
            "GET /api/sessions/{id}/events (SSE) or events_list",
            {"transport": ctx.transport},
        )
    if len(ctx.watches) >= MAX_WATCHES:
        raise LimitExceeded(
            f"this connection already has {len(ctx.watches)} watches (at most {MAX_WATCHES}); "
            "stop one with events_unwatch or watch several kinds at once",
            {"what": "watches per connection", "limit": MAX_WATCHES},
        )
    bus = ctx.services.bus
    sub, backlog, gap = bus.subscribe(
        since=params.since, session=params.session, kinds=params.kinds
    )
    watch_id = next(_watch_ids)
    notify = ctx.notify
    cancel = anyio.CancelScope()

    async def pump() -> None:
        with cancel:
            try:
                if gap:
                    await notify("events", {"watch_id": watch_id, "gap": True, "events": []})
                for part in chunks(backlog):
                    await notify("events", {"watch_id": watch_id, "events": part})
                async for batch in sub.batches():  # a burst travels in one frame
                    await notify("events", {"watch_id": watch_id, "events": batch})
                if sub.dropped:
                    await notify("events", {"watch_id": watch_id, "gap": True, "events": []})
            finally:
                sub.close()
                ctx.watches.pop(watch_id, None)

    ctx.watches[watch_id] = cancel.cancel
    ctx.start_soon(pump)
    return w.EventsWatchResult(watch_id=watch_id, cursor=bus.last_id, oldest=bus.oldest_id)


@registry.method(w.EventsUnwatchParams, w.EventsUnwatchResult)
async def events_unwatch(ctx: CallContext, params: w.EventsUnwatchParams) -> w.EventsUnwatchResult:
    """Stop a stream started by ``events_watch`` on this connection."""
    cancel = ctx.watches.pop(params.watch_id, None)
    if cancel is None:
        raise NotFound(
            f"no watch {params.watch_id} on this connection", {"watch_id": params.watch_id}
        )
    cancel()
    return w.EventsUnwatchResult(stopped=True)


@registry.method(w.EventsListParams, w.EventsListResult)
async def events_list(ctx: CallContext, params: w.EventsListParams) -> w.EventsListResult:
    """Return retained events after ``since`` (a page of at most ``limit``).

    ``cursor`` is the id to pass as ``since`` next time; ``gap`` says some
    events after ``since`` are no longer retained.
    """
    bus = ctx.services.bus
    events, gap = bus.replay(params.since, session=params.session, limit=params.limit)
    cursor = events[-1].id if events else max(params.since, 0)
    return w.EventsListResult(events=[wire_event(e) for e in events], cursor=cursor, gap=gap)


@registry.method(w.NoParams, w.EventsSchemaResult)
async def events_schema(ctx: CallContext, params: w.NoParams) -> w.EventsSchemaResult:
    """Return the event stream's types: every kind, and the JSON schema of one event.

    ``schema`` is a union tagged by ``kind`` (``discriminator.mapping`` names each
    kind's definition, with every field of its ``data``), plus notes (``note`` and
    ``note.*``, any object). The page and other clients dispatch on these kinds.
    """
    return w.EventsSchemaResult(kinds=list(ev.KINDS), schema=ev.events_schema())


@registry.method(w.EventsPublishParams, w.Event)
async def events_publish(ctx: CallContext, params: w.EventsPublishParams) -> w.Event:
    """Append an annotation (kind ``note`` or ``note.*``) to the event stream.

    For outside tools that want their remarks beside a session's events, e.g.
    "restarted the GPU node". Only ``note`` kinds: the daemon's own events
    cannot be forged. ``data`` may hold at most 64 KiB of JSON.
    """
    size = len(msgspec.json.encode(params.data))
    if size > MAX_NOTE_BYTES:
        raise InvalidParams(
            f"events_publish: data is {size} bytes of JSON, at most {MAX_NOTE_BYTES}",
            {"field": "data", "reason": "too large", "limit": MAX_NOTE_BYTES},
        )
    return wire_event(ctx.services.bus.publish(params.kind, params.data, session=params.session))
