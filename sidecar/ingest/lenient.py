"""Protobuf requests whose strings are not all valid UTF-8, read anyway.

protobuf refuses a whole ``ExportTraceServiceRequest`` (or logs request) when
one ``string`` field holds bytes that are not UTF-8; the Collector passes such
bytes through and batches them with other agents' spans, so refusing the
record would dead-letter all of them. When the strict parse fails, the record
is read again with a twin of the OTLP schema whose ``string`` fields are
``bytes`` (the wire format is the same), every such field that is not UTF-8
is repaired (each bad byte becomes U+FFFD), and the repaired request is parsed
by the real schema. What was repaired is counted per top-level item
(``resource_spans`` / ``resource_logs``) and per leaf record, in wire order,
so each span or log record can be flagged. Records that are not protobuf at
all still fail.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor
from google.protobuf.message import Message


def _files(root: FileDescriptor) -> list[FileDescriptor]:
    ordered: list[FileDescriptor] = []

    def visit(file: FileDescriptor) -> None:
        if file in ordered:
            return
        for dependency in file.dependencies:
            visit(dependency)
        ordered.append(file)

    visit(root)
    return ordered


def _bytes_strings(message: descriptor_pb2.DescriptorProto) -> None:
    for field in message.field:
        if field.type == descriptor_pb2.FieldDescriptorProto.TYPE_STRING:
            field.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
    for nested in message.nested_type:
        _bytes_strings(nested)


@cache
def _twin(descriptor: Descriptor) -> Any:
    """The message class of ``descriptor`` with every string field read as bytes."""
    pool = descriptor_pool.DescriptorPool()
    for file in _files(descriptor.file):
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        for message in proto.message_type:
            _bytes_strings(message)
        pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(descriptor.full_name))


def _repair_fields(message: Message) -> int:
    """Repair every bytes field of the twin that is not UTF-8 (all strings of the original)."""
    repaired = 0
    stack = [message]
    while stack:
        node = stack.pop()
        for field, value in node.ListFields():
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                if field.is_repeated:
                    stack.extend(value)
                else:
                    stack.append(value)
            elif field.type == FieldDescriptor.TYPE_BYTES and field.name not in _RAW_BYTES:
                if field.is_repeated:
                    continue  # OTLP has no repeated strings
                try:
                    value.decode("utf-8")
                except UnicodeDecodeError:
                    setattr(node, field.name, value.decode("utf-8", "replace").encode("utf-8"))
                    repaired += 1
    return repaired


# Fields that are bytes in OTLP itself (ids, bytes_value), never text.
_RAW_BYTES = frozenset({"trace_id", "span_id", "parent_span_id", "bytes_value"})


def parse_lenient(request: Message, payload: bytes, leaves: tuple[str, str, str]) -> list[int]:
    """Parse ``payload`` into ``request`` repairing non-UTF-8 strings; repairs per leaf record.

    ``leaves`` names the path to the leaf records (``resource_spans``,
    ``scope_spans``, ``spans``); a repair in a resource or scope counts for
    each of its leaves. Raises protobuf's ``DecodeError`` when the payload is
    not the message even so.
    """
    twin = _twin(request.DESCRIPTOR)()
    twin.ParseFromString(payload)
    top, middle, leaf = leaves
    counts: list[int] = []
    for item in getattr(twin, top):
        outer = _repair_fields(item.resource) if item.HasField("resource") else 0
        for group in getattr(item, middle):
            inner = outer + (_repair_fields(group.scope) if group.HasField("scope") else 0)
            inner += _repair_scalars(group)
            counts.extend(inner + _repair_fields(record) for record in getattr(group, leaf))
        _repair_scalars(item)
    _repair_scalars(twin)
    request.ParseFromString(twin.SerializeToString())
    return counts


def _repair_scalars(node: Message) -> int:
    # The schema_url strings beside the nested messages.
    repaired = 0
    for field, value in node.ListFields():
        if field.type == FieldDescriptor.TYPE_BYTES and not field.is_repeated:
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                setattr(node, field.name, value.decode("utf-8", "replace").encode("utf-8"))
                repaired += 1
    return repaired
