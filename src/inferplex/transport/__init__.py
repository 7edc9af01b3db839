"""Bytes on sockets: the HTTP/1.1 and gRPC servers, behind one small interface each.

Each protocol has two servers: the built-in one (the default: ``http_server.HttpServer``
on ``http_connection``/``http_cycle``; ``grpc_server.GrpcServer`` on ``http2*``) and a
reference twin on a well-kept library, one flag away (DESIGN.md, "The edge"):

- ``--http-server uvicorn``: :class:`inferplex.transport.uvicorn_http.UvicornHttpServer`;
- ``--grpc-server grpcio``: :class:`inferplex.transport.grpcio_server.GrpcioServer`.

The twins take what the built-in servers take (an ASGI app; a table of gRPC methods and a
guard) and have their ``start(sock)`` / ``stop(grace)``, so the composition root picks one
by config; the built-in HTTP server also calls an application natively (``respond``: a whole
request in, a whole answer out). Nothing here knows the V2 protocol; an error's gRPC status
comes from the one error table (``protocol/v2/errors.py``), grpcio's codes for both servers.
"""
