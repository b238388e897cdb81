"""Typed, field-selective decoding of Kineto JSON into :class:`Event` records.

A Kineto trace is mostly keys traceparse never reads (flow ids, ``bp``, ``s``, metadata
args) and ``args`` objects that only some tables need. :func:`decode_events` decodes the
event list with msgspec into :class:`RawEvent` structs holding only ``ph``, ``cat``,
``name``, ``pid``, ``tid``, and the **raw JSON text** of ``ts``, ``dur`` and ``args``; an
event's ``args`` is decoded later (:func:`decode_args`), and only for events that feed a
table; its times are converted column-wise from their exact decimal text
(:mod:`traceparse.kineto.times`), so no regex pass has to quote them first.

Why msgspec: on the 8-rank DLRM x20 set (129 MB) one rank file of 16.5 MB decodes in
0.03 s into structs against 0.10 s for ``orjson.loads`` of everything, and the structs
cost one attribute read per field afterwards instead of a ``dict.get`` (benchmarks/
RESULTS.md "Kineto decoding" has the measurement).

The other fields keep the types JSON gave them (``Any``). Anything the typed decoder
refuses (not JSON, not an object with ``traceEvents``, an event that is not an object)
goes through :func:`traceparse.kineto.io.decode` (orjson, every time quoted as text),
whose one-line errors name the problem; :func:`from_dicts` turns its events into
:class:`Event` structs holding Python values.

Example:
    >>> header, events = decode_events(b'{"traceEvents": [{"ph": "X", "ts": 1.5, "x": 2}]}', "t")
    >>> events[0].ph, bytes(events[0].ts), decode_args(events)
    ('X', b'1.5', [None])
"""

from __future__ import annotations

from operator import attrgetter
from pathlib import Path
from typing import Any, Union, cast

import msgspec
import orjson

from traceparse.errors import TraceError
from traceparse.kineto.io import decode as orjson_decode

#: Top-level keys :func:`traceparse.kineto.reader.parse` reads from the header.
HEADER_KEYS = ("schemaVersion", "deviceProperties", "distributedInfo", "baseTimeNanoseconds",
               "cuda_driver_version", "hip_driver_version")
_NO_ARGS = msgspec.Raw()
#: Events whose ``args`` :func:`decode_args` decodes per orjson call.
ARGS_CHUNK = 4096
_NULL = b"null"
_ARGS = attrgetter("args")


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


class RawEvent(Event, gc=False):
    """An :class:`Event` of the typed decoder: ``ts`` and ``dur`` are their undecoded JSON
    text (empty when absent), converted exactly by :mod:`traceparse.kineto.times`."""

    ts: msgspec.Raw = _NO_ARGS
    dur: msgspec.Raw = _NO_ARGS


class _Doc(msgspec.Struct, gc=False):
    """The top level of a trace object (field names are the JSON keys)."""

    traceEvents: list[RawEvent]
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    cuda_driver_version: Any = None
    hip_driver_version: Any = None


_DOC = msgspec.json.Decoder(_Doc)
_LIST = msgspec.json.Decoder(list[RawEvent])

#: Every phase of the Chrome trace event format (``ph``), flows last.
PHASES = "BEXiICbneSTpFPNODMVvRc()stf"
#: Flow events: only their number per (cat, ph) is read (links come from args.correlation).
FLOW_PHASES = "stf"
_RAW_FIELDS = [("cat", Any, None), ("name", Any, None), ("pid", Any, None), ("tid", Any, None),
               ("ts", msgspec.Raw, _NO_ARGS), ("dur", msgspec.Raw, _NO_ARGS),
               ("args", msgspec.Raw, _NO_ARGS)]


def _phase_event(ph: str) -> Any:
    """A :class:`RawEvent`-like struct for events of phase ``ph`` (the union's tag; read
    back as the class attribute ``ph``). A flow event keeps only ``cat``: msgspec skips
    its other fields instead of building a name, two ints and a raw time per event
    (a quarter of a Kineto trace's events are flows)."""
    fields = _RAW_FIELDS[:1] if ph in FLOW_PHASES else _RAW_FIELDS
    return msgspec.defstruct(f"PhaseEvent{ord(ph)}", fields, tag_field="ph", tag=ph,
                             gc=False, namespace={"ph": ph}, module=__name__)


_BY_PHASE: Any = Union[tuple(_phase_event(ph) for ph in PHASES)]  # noqa: UP007
_TAGGED_DOC = msgspec.defstruct(
    "_TaggedDoc", [("traceEvents", list[_BY_PHASE]), *((k, Any, None) for k in HEADER_KEYS)],
    gc=False, module=__name__)
#: Decoders of the events by phase (tried first), then of every event alike.
_DECODERS: tuple[tuple[Any, Any], ...] = (
    (msgspec.json.Decoder(_TAGGED_DOC), msgspec.json.Decoder(list[_BY_PHASE])), (_DOC, _LIST))


def decode_events(raw: bytes, path: Path | str) -> tuple[dict[str, Any], list[Event]]:
    """Decode JSON text into ``(header, events)`` with the typed decoder.

    ``header`` holds the :data:`HEADER_KEYS` the document has (empty for a bare list);
    events are structs of their phase (:func:`_phase_event`: the fields of
    :class:`RawEvent`, only ``cat`` for flows), or :class:`RawEvent` where an event's
    ``ph`` is missing or not a phase of the format. Input the typed decoders refuse is
    decoded by orjson instead, times quoted as text (same errors as before), into
    :class:`Event`.
    """
    bare = raw.lstrip()[:1] == b"["
    for doc_decoder, list_decoder in _DECODERS:
        try:
            if bare:
                return {}, cast(list[Event], list_decoder.decode(raw))
            doc = doc_decoder.decode(raw)
        except ValueError:  # msgspec's DecodeError/ValidationError, and invalid UTF-8
            continue  # (by phase: an event without a phase string, or an unknown one)
        header = {k: v for k in HEADER_KEYS if (v := getattr(doc, k)) is not None}
        return header, cast(list[Event], doc.traceEvents)
    header, events = orjson_decode(raw, path, quote_times=True)
    return header, from_dicts(events, path)


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
    """The decoded ``args`` of each event (None where absent), by orjson in chunks of
    :data:`ARGS_CHUNK` events.

    orjson (not msgspec) decodes them: the ``ranges`` table keeps every remaining argument
    as JSON text in ``payload``, and orjson's dicts re-encode to exactly the text the
    previous full-document decode produced. orjson first parses into its own document
    tree, ~10x the text: one call for the 33k cpu_op args of a DLRM x20 rank (4 MiB)
    peaked 48 MiB above its result; chunks bound that tree at no measurable cost.

    Raises:
        TraceError: an ``args`` value the typed pass skipped over is not valid JSON text
            (e.g. a lone UTF-16 surrogate escape), as the full decode would have said.
    """
    out: list[Any] = []
    for i in range(0, len(events), ARGS_CHUNK):
        parts = list(map(_ARGS, events[i:i + ARGS_CHUNK]))
        if not all(parts):  # an empty Raw (no args) is falsy: it becomes null
            parts = [a or _NULL for a in parts]
        try:
            out += orjson.loads(b"[" + b",".join(parts) + b"]")
        except orjson.JSONDecodeError as exc:
            raise TraceError(path, f"invalid JSON: {exc}") from None
    return out
