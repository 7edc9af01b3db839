"""Bytes on sockets: the HTTP/1.1 and gRPC servers, behind one small interface each.

Each protocol has two servers: the built-in one (today still in ``frontends/``: the default)
and a reference twin on a well-kept library, one flag away (DESIGN.md, "The edge"):

- ``--http-server uvicorn``: :class:`inferplex.transport.uvicorn_http.UvicornHttpServer`;
- ``--grpc-server grpcio``: :class:`inferplex.transport.grpcio_server.GrpcioServer`.

The twins take what the built-in servers take (an ASGI app; a table of gRPC methods and a
guard) and have their ``start(sock)`` / ``stop(grace)``, so the composition root picks one
by config. Nothing here knows the V2 protocol.
"""
