#!/usr/bin/env bash
# Regenerates kinference/v1/*_pb2*.py(i) from proto/kinference/v1/*.proto (picker.proto, the
# spec's, and session.proto, kinference's own PickerSession).
#   proto/generate.sh          write the stubs
#   proto/generate.sh --check  fail if the checked-in stubs are stale (CI runs this)
# Needs the dev extra (grpcio-tools and mypy-protobuf at the versions pinned in pyproject.toml).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python}
bindir=$(dirname "$(command -v "$python")")
out=$root
if [ "${1:-}" = "--check" ]; then
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi
# protoc-gen-mypy and protoc-gen-mypy_grpc live beside the interpreter (mypy-protobuf).
PATH="$bindir:$PATH" "$python" -m grpc_tools.protoc -I"$root/proto" \
    --python_out="$out" --grpc_python_out="$out" --mypy_out="$out" --mypy_grpc_out="$out" \
    "$root/proto/kinference/v1/picker.proto" "$root/proto/kinference/v1/session.proto" >/dev/null
if [ "${1:-}" = "--check" ]; then
    stale=0
    for f in {picker,session}_pb2.py {picker,session}_pb2.pyi {picker,session}_pb2_grpc.py \
        {picker,session}_pb2_grpc.pyi; do
        if ! cmp -s "$out/kinference/v1/$f" "$root/kinference/v1/$f"; then
            echo "stale generated stub: kinference/v1/$f (run proto/generate.sh)" >&2
            stale=1
        fi
    done
    if ! cmp -s "$root/proto/kinference/v1/picker.proto" "$root/../shared/spec/picker.proto" \
        && [ -f "$root/../shared/spec/picker.proto" ]; then
        echo "proto/kinference/v1/picker.proto differs from ../shared/spec/picker.proto" >&2
        stale=1
    fi
    exit $stale
fi
