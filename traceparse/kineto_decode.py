"""Typed, field-selective decoding of Kineto JSON into :class:`Event` records.

A Kineto trace is mostly keys traceparse never reads (flow ids, ``bp``, ``s``, metadata
args) and ``args`` objects that only some tables need. :func:`decode_events` decodes the
event list with msgspec into :class:`Event` structs holding only ``ph``, ``cat``,
``name``, ``pid``, ``tid``, ``ts``, ``dur`` and the **raw bytes** of ``args``; an event's
``args`` is decoded later (:func:`decode_args`), and only for events that feed a table.

Why msgspec: on the 8-rank DLRM x20 set (129 MB) one rank file of 16.5 MB decodes in
0.03 s into structs against 0.10 s for ``orjson.loads`` of everything, and the structs
cost one attribute read per field afterwards instead of a ``dict.get`` (benchmarks/
RESULTS.md "Kineto decoding" has the measurement).

Values keep the types JSON gave them (``Any`` fields), exactly as the orjson path: ints,
floats, text of quoted times (see :func:`traceparse.kineto_io.quote`), so the
exact-nanosecond rules of :mod:`traceparse.kineto_io` apply unchanged. Anything the typed
decoder refuses (not JSON, not an object with ``traceEvents``, an event that is not an
object) goes through :func:`traceparse.kineto_io.decode` (orjson), whose one-line errors
name the problem; :func:`from_dicts` turns its events into the same structs.

Example:
    >>> header, events = decode_events(b'{"traceEvents": [{"ph": "X", "ts": 1, "x": 2}]}', "t")
    >>> events[0].ph, events[0].ts, decode_args(events)
    ('X', 1, [None])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import orjson

from traceparse.errors import TraceError
from traceparse.kineto_io import decode as orjson_decode
from traceparse.kineto_io import quote

#: Top-level keys :func:`traceparse.kineto.parse` reads from the header.
HEADER_KEYS = ("schemaVersion", "deviceProperties", "distributedInfo", "baseTimeNanoseconds")
_NO_ARGS = msgspec.Raw()
_NULL = b"null"


class Event(msgspec.Struct, gc=False):
    """One trace event, reduced to the fields traceparse reads (absent -> None).

    ``args`` is the undecoded JSON text of the event's ``args`` (empty when absent); see
    :func:`decode_args`.
    """

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: msgspec.Raw = _NO_ARGS


class _Doc(msgspec.Struct, gc=False):
    """The top level of a trace object (field names are the JSON keys)."""

    traceEvents: list[Event]
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None


_DOC = msgspec.json.Decoder(_Doc)
_LIST = msgspec.json.Decoder(list[Event])


def decode_events(raw: bytes, path: Path | str, *, quote_times: bool = False,
                  quote_big: bool = False) -> tuple[dict[str, Any], list[Event]]:
    """Decode JSON text into ``(header, events)`` with the typed decoder.

    ``header`` holds the :data:`HEADER_KEYS` the document has (empty for a bare list);
    ``quote_times``/``quote_big`` are those of :func:`traceparse.kineto_io.decode`. Input
    the typed decoder refuses is decoded by orjson instead (same errors as before).
    """
    text = quote(raw, quote_times=quote_times, quote_big=quote_big)
    try:
        if text.lstrip()[:1] == b"[":
            return {}, _LIST.decode(text)
        doc = _DOC.decode(text)
    except ValueError:  # msgspec's DecodeError/ValidationError, and invalid UTF-8
        header, events = orjson_decode(text, path)
        return header, from_dicts(events, path)
    header = {k: v for k in HEADER_KEYS if (v := getattr(doc, k)) is not None}
    return header, doc.traceEvents


def from_dicts(events: list[Any], path: Path | str) -> list[Event]:
    """Events decoded as dicts (the orjson path) -> :class:`Event` structs.

    Raises:
        TraceError: an element of ``traceEvents`` is not an object.
    """
    out = []
    for e in events:
        if not isinstance(e, dict):
            raise TraceError(path, f"traceEvents holds a {type(e).__name__}, expected event "
                                   "objects")
        a = e.get("args")
        out.append(Event(ph=e.get("ph"), cat=e.get("cat"), name=e.get("name"),
                         pid=e.get("pid"), tid=e.get("tid"), ts=e.get("ts"), dur=e.get("dur"),
                         args=_NO_ARGS if a is None else msgspec.Raw(orjson.dumps(a))))
    return out


def decode_args(events: list[Event], path: Path | str = "") -> list[Any]:
    """The decoded ``args`` of each event (None where absent), in one orjson call.

    orjson (not msgspec) decodes them: the ``ranges`` table keeps every remaining argument
    as JSON text in ``payload``, and orjson's dicts re-encode to exactly the text the
    previous full-document decode produced.

    Raises:
        TraceError: an ``args`` value the typed pass skipped over is not valid JSON text
            (e.g. a lone UTF-16 surrogate escape), as the full decode would have said.
    """
    if not events:
        return []
    parts = [e.args or _NULL for e in events]  # an empty Raw (no args) is falsy
    try:
        return list(orjson.loads(b"[" + b",".join(parts) + b"]"))
    except orjson.JSONDecodeError as exc:
        raise TraceError(path, f"invalid JSON: {exc}") from None
