"""The gRPC layer: servicer, status mapping, framing, server options, TLS."""
