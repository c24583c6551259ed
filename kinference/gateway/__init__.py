"""The reference gateway: an OpenAI-compatible HTTP front end that is a conformant picker caller.

`kinference gateway` streams each client body into PushBody, asks Pick where it goes, streams
PullBody to the chosen engine or provider, relays the response back with backpressure and
reports TTFT, inter-token gaps and usage (or Abort) over one long-lived gRPC channel.

Nothing in this package's `__init__`, `settings`, `cli`, `backends`, `callers`, `timing` or
`usage` imports the HTTP stack, so the command can say clearly when the `gateway` extra is
missing.
"""
