"""The one codec between OTLP (protobuf and OTLP/JSON) and the SDK's `ReadableSpan`.

Everything downstream (the in-process processor, the offline `ingest` command, a receiver
sidecar) speaks `ReadableSpan`, so the pipeline stays identical whether spans come from a live
`TracerProvider` or from files the OpenTelemetry Collector wrote. Reading is forgiving by design:
one bad line, span or link is reported and skipped, never allowed to sink the data around it.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import logging
import re
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from io import BufferedReader
from itertools import chain
from pathlib import Path
from typing import IO, Any, TextIO

from google.protobuf import json_format
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, SpanFlags
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status as PbStatus
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

__all__ = [
    "Batch",
    "OtlpDecodeError",
    "OtlpJsonFileExporter",
    "message_to_json",
    "read_otlp_json",
    "request_from_json",
    "request_to_json",
    "spans_from_request",
]

_logger = logging.getLogger(__name__)

_SPAN_KINDS = {
    PbSpan.SPAN_KIND_INTERNAL: SpanKind.INTERNAL,
    PbSpan.SPAN_KIND_SERVER: SpanKind.SERVER,
    PbSpan.SPAN_KIND_CLIENT: SpanKind.CLIENT,
    PbSpan.SPAN_KIND_PRODUCER: SpanKind.PRODUCER,
    PbSpan.SPAN_KIND_CONSUMER: SpanKind.CONSUMER,
}
_STATUS_CODES = {
    PbStatus.STATUS_CODE_UNSET: StatusCode.UNSET,
    PbStatus.STATUS_CODE_OK: StatusCode.OK,
    PbStatus.STATUS_CODE_ERROR: StatusCode.ERROR,
}
_TRACE_FLAGS_MASK = SpanFlags.SPAN_FLAGS_TRACE_FLAGS_MASK
_HAS_IS_REMOTE = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_IS_REMOTE = SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK

_ID_KEYS = (("traceId", "trace_id"), ("spanId", "span_id"), ("parentSpanId", "parent_span_id"))
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_WHITESPACE = re.compile(r"\s*")
_GZIP_MAGIC = b"\x1f\x8b"
_READ_ERRORS = (OSError, EOFError, zlib.error)


class OtlpDecodeError(ValueError):
    """Input that cannot be read as an OTLP trace request; the message says where and why."""


class _RejectedId(ValueError):
    """An id that cannot name a span; the span (or link) carrying it is dropped and reported."""


# --- OTLP protobuf -> ReadableSpan -------------------------------------------------------------


def spans_from_request(
    request: ExportTraceServiceRequest, problems: list[str] | None = None
) -> list[ReadableSpan]:
    """Turn every usable span of `request` into a `ReadableSpan`.

    Spans (and links) with unusable ids are skipped, not raised, so one broken producer cannot
    hide the rest of a batch; each is described in `problems` when given, else logged.
    """
    spans: list[ReadableSpan] = []
    for resource_spans in request.resource_spans:
        resource = _resource(resource_spans)
        for scope_spans in resource_spans.scope_spans:
            scope = _scope(scope_spans)
            for pb_span in scope_spans.spans:
                try:
                    spans.append(_span(pb_span, resource, scope, problems))
                except _RejectedId as exc:
                    _report(problems, f"span {pb_span.name!r} rejected: {exc}")
    return spans


def _report(problems: list[str] | None, message: str) -> None:
    """Hand a problem to the caller's list, or to the log when nobody asked."""
    if problems is None:
        _logger.warning("OTLP decode: %s", message)
    else:
        problems.append(message)


def _resource(resource_spans: ResourceSpans) -> Resource:
    """One shared `Resource` per OTLP resource block, so exporters can group spans again."""
    attributes = _key_values(resource_spans.resource.attributes)
    return Resource(attributes, resource_spans.schema_url)


def _scope(scope_spans: ScopeSpans) -> InstrumentationScope:
    """Keep an empty version as "", which is what the SDK's own tracers record."""
    scope = scope_spans.scope
    return InstrumentationScope(
        scope.name, scope.version, scope_spans.schema_url, _key_values(scope.attributes)
    )


def _span(
    pb_span: PbSpan,
    resource: Resource,
    scope: InstrumentationScope,
    problems: list[str] | None,
) -> ReadableSpan:
    """Build the SDK span; raises `_RejectedId` when the span cannot be identified."""
    context = _span_context(pb_span)
    return ReadableSpan(
        name=pb_span.name,
        context=context,
        parent=_parent(pb_span, context),
        resource=resource,
        attributes=_attributes(pb_span.attributes, pb_span.dropped_attributes_count),
        events=_events(pb_span),
        links=_links(pb_span, problems),
        kind=_SPAN_KINDS.get(pb_span.kind, SpanKind.INTERNAL),
        status=_status(pb_span.status),
        start_time=pb_span.start_time_unix_nano or None,
        end_time=pb_span.end_time_unix_nano or None,
        instrumentation_scope=scope,
    )


def _span_context(pb_span: PbSpan) -> SpanContext:
    """Always mark the span sampled: it was exported, and SDK processors drop unsampled spans.

    The Python SDK's OTLP encoder never writes the W3C trace-flag bits, so trusting them would
    make every span it produced look unsampled.
    """
    flags = (pb_span.flags & _TRACE_FLAGS_MASK) | TraceFlags.SAMPLED
    return SpanContext(
        trace_id=_id(pb_span.trace_id, 16, "trace_id"),
        span_id=_id(pb_span.span_id, 8, "span_id"),
        is_remote=False,
        trace_flags=TraceFlags(flags),
        trace_state=_trace_state(pb_span.trace_state),
    )


def _parent(pb_span: PbSpan, context: SpanContext) -> SpanContext | None:
    """Treat an all-zero parent id as "no parent", as some translators write it for roots."""
    raw = pb_span.parent_span_id
    if not raw.strip(b"\0"):
        return None
    return SpanContext(
        trace_id=context.trace_id,
        span_id=_id(raw, 8, "parent_span_id"),
        is_remote=_is_remote(pb_span.flags),
        trace_flags=context.trace_flags,
        trace_state=context.trace_state,
    )


def _id(raw: bytes, size: int, field: str) -> int:
    """Decode a big-endian id, refusing lengths and values the W3C says name nothing."""
    if len(raw) != size:
        raise _RejectedId(f"{field} must be {size} bytes, got {len(raw)}")
    value = int.from_bytes(raw, "big")
    if value == 0:
        raise _RejectedId(f"{field} is all zeros")
    return value


def _is_remote(flags: int) -> bool:
    """OTLP only knows remoteness when the producer set the has-is-remote bit."""
    return bool(flags & _HAS_IS_REMOTE) and bool(flags & _IS_REMOTE)


def _trace_state(header: str) -> TraceState:
    return TraceState.from_header([header]) if header else TraceState()


def _events(pb_span: PbSpan) -> BoundedList:
    """Carry the producer's dropped-event count so re-exported copies still report it."""
    events = [
        Event(
            event.name,
            _attributes(event.attributes, event.dropped_attributes_count),
            event.time_unix_nano,  # never None: the SDK would stamp "now" on it
        )
        for event in pb_span.events
    ]
    return _bounded_list(events, pb_span.dropped_events_count)


def _links(pb_span: PbSpan, problems: list[str] | None) -> BoundedList:
    """Drop only the unusable links, keeping the span that carries them."""
    links: list[Link] = []
    for index, pb_link in enumerate(pb_span.links):
        try:
            links.append(_link(pb_link))
        except _RejectedId as exc:
            _report(problems, f"span {pb_span.name!r}: link {index} dropped: {exc}")
    return _bounded_list(links, pb_span.dropped_links_count)


def _link(pb_link: PbSpan.Link) -> Link:
    context = SpanContext(
        trace_id=_id(pb_link.trace_id, 16, "link trace_id"),
        span_id=_id(pb_link.span_id, 8, "link span_id"),
        is_remote=_is_remote(pb_link.flags),
        trace_flags=TraceFlags(pb_link.flags & _TRACE_FLAGS_MASK),
        trace_state=_trace_state(pb_link.trace_state),
    )
    return Link(context, _attributes(pb_link.attributes, pb_link.dropped_attributes_count))


def _bounded_list(items: list[Any], dropped: int) -> BoundedList:
    bounded = BoundedList.from_seq(None, items)
    bounded.dropped = dropped
    return bounded


def _status(pb_status: PbStatus) -> Status:
    """The SDK only keeps a description on ERROR (and warns otherwise), so pass it only there."""
    code = _STATUS_CODES.get(pb_status.code, StatusCode.UNSET)
    description = (pb_status.message or None) if code is StatusCode.ERROR else None
    return Status(code, description)


def _attributes(pairs: Iterable[KeyValue], dropped: int = 0) -> BoundedAttributes:
    """Immutable attributes like the SDK's own, still counting what the producer dropped."""
    attributes = BoundedAttributes(attributes=_key_values(pairs), immutable=True)
    attributes.dropped += dropped
    return attributes


def _key_values(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    """Keys whose value is empty carry nothing the SDK can hold, so they are left out."""
    result: dict[str, Any] = {}
    for pair in pairs:
        value = _any_value(pair.value)
        if value is not None:
            result[pair.key] = value
    return result


def _any_value(value: AnyValue) -> Any:
    """Arrays become tuples, as the SDK stores every sequence; kvlists become dicts."""
    field = value.WhichOneof("value")
    if field is None:
        return None
    if field == "array_value":
        return tuple(_any_value(item) for item in value.array_value.values)
    if field == "kvlist_value":
        return _key_values(value.kvlist_value.values)
    return getattr(value, field)


# --- OTLP/JSON <-> OTLP protobuf ---------------------------------------------------------------


def request_from_json(document: dict[str, Any]) -> ExportTraceServiceRequest:
    """Parse one OTLP/JSON trace request (hex ids, enum names or numbers, either key style).

    Raises `OtlpDecodeError` with the offending field's path for anything that is not one.
    """
    if not isinstance(document, dict):
        raise OtlpDecodeError(f"expected a JSON object, got {type(document).__name__}")
    try:
        prepared = _without_lone_surrogates(document)
    except RecursionError:
        raise OtlpDecodeError("document is nested too deeply") from None
    _rewrite_ids(prepared, _hex_to_base64)
    try:
        return json_format.ParseDict(
            prepared, ExportTraceServiceRequest(), ignore_unknown_fields=True
        )
    except (json_format.ParseError, TypeError, ValueError, OverflowError, RecursionError) as exc:
        # OverflowError: an integer too large for a double (ParseDict lets it through).
        raise OtlpDecodeError(str(exc) or type(exc).__name__) from None


def request_to_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """Encode spans as the OTLP/JSON the Collector writes: camelCase, hex ids, numeric enums."""
    return message_to_json(encode_spans(spans))


def message_to_json(request: ExportTraceServiceRequest) -> dict[str, Any]:
    """An OTLP request as OTLP/JSON (what `request_from_json` reads back)."""
    document = json_format.MessageToDict(request, use_integers_for_enums=True)
    _rewrite_ids(document, _base64_to_hex)
    return document


def _without_lone_surrogates(value: Any) -> Any:
    """Copy the document, replacing lone surrogates that protobuf would reject outright.

    They arrive as `\\udXXX` escapes when a producer cut a string inside a surrogate pair,
    which is common for truncated LLM text; one such character must not cost the whole batch.
    """
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {
            _without_lone_surrogates(key): _without_lone_surrogates(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_without_lone_surrogates(item) for item in value]
    return value


def _rewrite_ids(document: dict[str, Any], convert: Callable[[str, str], str]) -> None:
    """Apply `convert` in place to every span and link id, the only fields not in base64."""
    for path, span in _id_holders(document):
        for keys in _ID_KEYS:
            for key in keys:
                if isinstance(span.get(key), str):
                    span[key] = convert(span[key], f"{path}.{key}")


def _id_holders(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield (path, dict) for spans and their links; malformed parts are left to ParseDict."""
    for rs_path, resource_spans in _children(document, "", ("resourceSpans", "resource_spans")):
        for ss_path, scope_spans in _children(
            resource_spans, rs_path, ("scopeSpans", "scope_spans")
        ):
            for span_path, span in _children(scope_spans, ss_path, ("spans",)):
                yield span_path, span
                yield from _children(span, span_path, ("links",))


def _children(
    node: dict[str, Any], path: str, keys: tuple[str, ...]
) -> Iterator[tuple[str, dict[str, Any]]]:
    prefix = f"{path}." if path else ""
    for key in keys:
        items = node.get(key)
        if isinstance(items, list):
            for index, item in enumerate(items):
                if isinstance(item, dict):
                    yield f"{prefix}{key}[{index}]", item


def _hex_to_base64(value: str, where: str) -> str:
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise OtlpDecodeError(f"{where}: not a hex id: {value[:40]!r}") from None
    return base64.b64encode(raw).decode("ascii")


def _base64_to_hex(value: str, where: str) -> str:
    try:
        return base64.b64decode(value, validate=True).hex()
    except binascii.Error:
        raise ValueError(f"{where}: protobuf wrote a non-base64 id: {value!r}") from None


# --- Files: reading -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Batch:
    """What one line (or document) of a file yielded.

    `spans` and `error` are not exclusive: a line can keep its good spans while `error` names
    the ones that were dropped. `size` counts on-disk bytes consumed so far (compressed bytes
    for .gz), so it can be set against the file size for progress.
    """

    source: str
    line: int
    spans: list[ReadableSpan]
    error: str | None
    size: int


def read_otlp_json(path: str | Path) -> Iterator[Batch]:
    """Read OTLP/JSON trace requests from a file, one `Batch` per request, never stopping early.

    Accepts JSON Lines as the Collector's `file` exporter writes them, a single (possibly
    pretty-printed) document, and gzip-compressed forms of both. Invalid bytes become U+FFFD.
    """
    source = str(path)
    with open(path, "rb") as raw:
        reader = _LineReader(raw)
        lines = iter(reader)
        head = _head(lines)
        if head and _parses(head[-1]):
            yield from _line_batches(chain(head, lines), source, reader.consumed)
        else:
            data = b"".join(chain(head, lines))
            yield from _document_batches(data, source, reader.consumed())
        if reader.error is not None:
            line = reader.lines + 1
            error = f"line {line}: unreadable input: {reader.error}"
            yield Batch(source, line, [], error, reader.consumed())


class _LineReader:
    """Iterate a file's lines, gunzipping if needed, and remember how far and how it went.

    A truncated .gz breaks mid-stream; the lines before the break must still be used, so the
    break is recorded in `error` instead of raised.
    """

    def __init__(self, raw: BufferedReader) -> None:
        self._raw = raw
        self._seekable = raw.seekable()
        # Sniff the magic bytes rather than trust the name; peek also works on pipes.
        compressed = raw.peek(len(_GZIP_MAGIC))[: len(_GZIP_MAGIC)] == _GZIP_MAGIC
        self._stream: IO[bytes] = gzip.GzipFile(fileobj=raw) if compressed else raw
        self._seen = 0
        self.lines = 0
        self.error: str | None = None

    def __iter__(self) -> Iterator[bytes]:
        try:
            for data in self._stream:
                self.lines += 1
                self._seen += len(data)
                yield data
        except _READ_ERRORS as exc:
            self.error = str(exc) or type(exc).__name__

    def consumed(self) -> int:
        """On-disk bytes read so far; a pipe cannot tell, so there it is the bytes seen."""
        return self._raw.tell() if self._seekable else self._seen


def _head(lines: Iterator[bytes]) -> list[bytes]:
    """Leading blank lines plus the first non-blank one: enough to tell the format."""
    head: list[bytes] = []
    for data in lines:
        head.append(data)
        if data.strip():
            break
    return head


def _parses(data: bytes) -> bool:
    """A first line that is complete JSON on its own means the file is JSON Lines."""
    try:
        json.loads(_text(data))
    except (ValueError, RecursionError):  # ValueError: also a number too long to convert
        return False
    return True


def _text(data: bytes) -> str:
    """Decode leniently: a stray byte must not cost the request around it."""
    return data.decode("utf-8", errors="replace").removeprefix("\ufeff")


def _line_batches(
    lines: Iterable[bytes], source: str, consumed: Callable[[], int]
) -> Iterator[Batch]:
    for number, data in enumerate(lines, start=1):
        if data.strip():
            yield _line_batch(_text(data), source, number, consumed())


def _line_batch(text: str, source: str, line: int, size: int) -> Batch:
    try:
        document = json.loads(text)
    except ValueError as exc:
        return Batch(source, line, [], f"line {line}: invalid JSON: {_json_error(exc)}", size)
    except RecursionError:
        return Batch(source, line, [], f"line {line}: invalid JSON: nested too deeply", size)
    return _request_batch(document, source, line, size)


def _json_error(exc: ValueError) -> str:
    """Where the parser stopped; a number too long for Python has no position, only a reason."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} (column {exc.colno})"
    return str(exc).split(";")[0]


def _request_batch(document: Any, source: str, line: int, size: int) -> Batch:
    """Decode one parsed document, keeping good spans next to a note about the bad ones."""
    try:
        request = request_from_json(document)
    except OtlpDecodeError as exc:
        return Batch(source, line, [], f"line {line}: not an OTLP trace request: {exc}", size)
    if not request.resource_spans:
        other = [key for key in ("resourceLogs", "resourceMetrics") if key in document]
        what = f"it holds {other[0]}, not traces" if other else "it has no resourceSpans"
        return Batch(source, line, [], f"line {line}: not an OTLP trace request: {what}", size)
    problems: list[str] = []
    spans = spans_from_request(request, problems)
    error = f"line {line}: {'; '.join(problems)}" if problems else None
    return Batch(source, line, spans, error, size)


def _document_batches(data: bytes, source: str, size: int) -> list[Batch]:
    """Parse whole documents; if that breaks, keep whichever reading recovers more spans.

    A JSON Lines file whose first line is damaged also lands here, and reading it line by line
    then saves every later line.
    """
    text = _text(data)
    batches, broken = _documents(text, source, size)
    if not broken:
        return batches
    lines = list(enumerate(data.split(b"\n"), start=1))
    by_line = [
        _line_batch(_text(line), source, number, size) for number, line in lines if line.strip()
    ]
    more = _span_count(by_line) - _span_count(batches)
    return by_line if more > 0 or (more == 0 and _looks_like_lines(lines)) else batches


def _looks_like_lines(lines: list[tuple[int, bytes]]) -> bool:
    """Several lines that each open an object: JSON Lines, however damaged, so each bad line
    is named on its own (a pretty-printed document has lines that open no object)."""
    filled = [line.strip() for _, line in lines if line.strip()]
    return len(filled) > 1 and all(line.startswith(b"{") for line in filled)


def _documents(text: str, source: str, size: int) -> tuple[list[Batch], bool]:
    """Decode consecutive JSON documents; the flag says whether the text ended in bad JSON."""
    decoder = json.JSONDecoder()
    batches: list[Batch] = []
    position, line = 0, 1
    while (start := _skip_whitespace(text, position)) < len(text):
        line += text.count("\n", position, start)
        try:
            document, position = decoder.raw_decode(text, start)
        except json.JSONDecodeError as exc:
            error = f"line {exc.lineno}: invalid JSON: {_json_error(exc)}"
            batches.append(Batch(source, exc.lineno, [], error, size))
            return batches, True
        except ValueError as exc:
            error = f"line {line}: invalid JSON: {_json_error(exc)}"
            batches.append(Batch(source, line, [], error, size))
            return batches, True
        except RecursionError:
            error = f"line {line}: invalid JSON: nested too deeply"
            batches.append(Batch(source, line, [], error, size))
            return batches, True
        batches.append(_request_batch(document, source, line, size))
        line += text.count("\n", start, position)
    return batches, False


def _skip_whitespace(text: str, position: int) -> int:
    match = _WHITESPACE.match(text, position)
    return match.end() if match else position


def _span_count(batches: list[Batch]) -> int:
    return sum(len(batch.spans) for batch in batches)


# --- Files: writing -----------------------------------------------------------------------------


class OtlpJsonFileExporter(SpanExporter):
    """Append one OTLP/JSON request per `export()` call, the JSON Lines the Collector writes.

    Files it writes read back with `read_otlp_json`, and the Collector's `otlpjsonfile` receiver
    can replay them.
    """

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO | None = self._path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Encode outside the lock so concurrent callers only serialise on the write."""
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            document = request_to_json(spans)
        except (ValueError, TypeError):
            _logger.exception("cannot encode %d spans as OTLP/JSON", len(spans))
            return SpanExportResult.FAILURE
        line = json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n"
        with self._lock:
            if self._file is None:
                _logger.warning("export to %s after shutdown", self._path)
                return SpanExportResult.FAILURE
            try:
                self._file.write(line)
                self._file.flush()
            except OSError:
                _logger.exception("cannot write spans to %s", self._path)
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        with self._lock:
            if self._file is not None:
                self._file.flush()
        return True

    def shutdown(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
