"""h208, leftover a: what a grpc.aio servicer learns of a unary call its client cancelled.

A handler that is still running when the client cancels gets CancelledError (kinference's
Pick: before its decision, which releases the body). Its done callback then reads
`context.cancelled()` False and `context.done()` False: grpc.aio sets neither from a client's
cancel (`_handle_cancellation_from_core` only cancels the task; `cancelled()` reads the
status code the handler set). Once the handler has returned (kinference's Pick returns in
the loop step of its decision), the status is marked sent before the write, a cancel then
does not touch the task, and a failed write (ExecuteBatchError with the client closed) is
swallowed by `_handle_exceptions`: nothing tells the servicer the answer never went out.
Run: python docs/h208/cancel_probe.py  (grpcio 1.85.4: ['handler cancelled', ('done', False, False)])
"""

import asyncio

import grpc

seen: list[object] = []


async def handler(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    context.add_done_callback(lambda ctx: seen.append(("done", ctx.done(), ctx.cancelled())))
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        seen.append("handler cancelled")
        raise
    return b"x"


async def main() -> None:
    server = grpc.aio.server()
    methods = {"M": grpc.unary_unary_rpc_method_handler(handler)}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.T", methods),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary("/t.T/M")(b"request")
        await asyncio.sleep(0.3)  # the handler is in its sleep by then
        call.cancel()
        await asyncio.sleep(0.3)  # the cancel reaches the server
    await server.stop(None)
    print(seen)


asyncio.run(main())
