"""Load tests and benchmarks for kinference: baseline server, client flows, benchmark runners."""
