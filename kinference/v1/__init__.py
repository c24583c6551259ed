"""Stubs generated from proto/kinference/v1/picker.proto by proto/generate.sh. Do not edit."""
