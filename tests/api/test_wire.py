"""Wire identity: kinference's picker.proto, its generated stubs and the spec's picker.proto
describe the same messages, fields (numbers, types, labels, names), enums and methods."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2
from grpc_tools import protoc

from kinference.v1 import picker_pb2

ROOT = Path(__file__).resolve().parents[2]
OURS = ROOT / "proto" / "kinference" / "v1" / "picker.proto"
# The spec sits beside the project (../shared/spec), whether this checkout is the main one or
# a worktree one level further down; KINFERENCE_SPEC_PROTO names it anywhere else.
SPEC_CANDIDATES = [
    ROOT.parent / "shared/spec/picker.proto",
    ROOT.parents[1] / "shared/spec/picker.proto",
]


def spec_proto() -> Path | None:
    named = os.environ.get("KINFERENCE_SPEC_PROTO")
    found = [Path(named)] if named else [p for p in SPEC_CANDIDATES if p.is_file()]
    return found[0] if found else None


def compiled(proto: Path, out: Path) -> descriptor_pb2.FileDescriptorProto:
    """The file's descriptor as protoc builds it (no comments or source positions)."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / (proto.stem + ".pb")
    code = protoc.main(
        ["protoc", f"-I{proto.parent}", f"--descriptor_set_out={target}", str(proto)]
    )
    assert code == 0, f"protoc failed on {proto}"
    files = descriptor_pb2.FileDescriptorSet.FromString(target.read_bytes()).file
    assert len(files) == 1
    return files[0]


def shape(file: descriptor_pb2.FileDescriptorProto) -> dict[str, object]:
    """What decides the wire and the method paths, flattened for a readable diff."""
    out: dict[str, object] = {"package": file.package, "syntax": file.syntax}

    def enums(prefix: str, found: list[descriptor_pb2.EnumDescriptorProto]) -> None:
        for enum in found:
            out[f"enum {prefix}{enum.name}"] = [(v.name, v.number) for v in enum.value]

    def messages(prefix: str, found: list[descriptor_pb2.DescriptorProto]) -> None:
        for message in found:
            name = prefix + message.name
            out[f"message {name}"] = [
                (
                    f.name,
                    f.number,
                    f.type,
                    f.label,
                    f.type_name.rsplit(".", 1)[-1],
                    f.HasField("oneof_index") and message.oneof_decl[f.oneof_index].name,
                    f.proto3_optional,
                )
                for f in message.field
            ]
            enums(name + ".", list(message.enum_type))
            messages(name + ".", list(message.nested_type))

    enums("", list(file.enum_type))
    messages("", list(file.message_type))
    for service in file.service:
        out[f"service {service.name}"] = [
            (m.name, m.input_type, m.output_type, m.client_streaming, m.server_streaming)
            for m in service.method
        ]
    return out


def generated() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto()
    picker_pb2.DESCRIPTOR.CopyToProto(file)
    return file


def test_the_generated_stubs_are_the_proto_file(tmp_path: Path) -> None:
    assert shape(generated()) == shape(compiled(OURS, tmp_path))


def test_the_proto_file_is_wire_identical_to_the_spec(tmp_path: Path) -> None:
    spec = spec_proto()
    if spec is None:
        pytest.skip("the spec's picker.proto is not beside this checkout (KINFERENCE_SPEC_PROTO)")
    ours, theirs = shape(compiled(OURS, tmp_path)), shape(compiled(spec, tmp_path / "spec"))
    assert ours == theirs


def test_the_shape_sees_what_matters() -> None:
    """The comparison is not vacuous: it holds field numbers, enum values and methods."""
    found = shape(generated())
    assert ("stream_id", 1, 4, 1, "", False, False) in found["message PushBodyResponse"]
    assert ("cached_tokens", 5, 13, 1, "", "_cached_tokens", True) in found[
        "message ReportFinalTokenRequest"
    ]
    assert ("BACKEND_UNAUTHORIZED", 4) in found["enum AbortRequest.Reason"]
    assert found["package"] == "kinference.v1"
    methods = found["service Picker"]
    assert [m[0] for m in methods] == [
        "PushBody",
        "Pick",
        "PullBody",
        "ReportFirstToken",
        "ReportFinalToken",
        "Abort",
    ]
