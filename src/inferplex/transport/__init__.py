"""Bytes on sockets: the HTTP/1.1 and gRPC servers, behind one small interface each.

Each protocol has two servers: the built-in one (the default: ``http_server.HttpServer``
on ``http_connection``/``http_cycle``; ``grpc_server.GrpcServer`` on ``http2*``) and a
reference twin on a well-kept library, one flag away (DESIGN.md, "The edge"):

- ``--http-server uvicorn``: :class:`inferplex.transport.uvicorn_http.UvicornHttpServer`;
- ``--grpc-server grpcio``: :class:`inferplex.transport.grpcio_server.GrpcioServer`.

Every server is built the same way: from what it serves (a native app,
``interface.NativeApp``; a table of gRPC methods and a guard) and the one listener spec
(``listener.ListenerSpec``, built once from ServerConfig), by the factory its flag names
(``servers.py``); each has ``start(sock)`` / ``stop(grace)``. uvicorn reaches the native app
through the one ASGI adapter (``asgi.py``). Nothing here knows the V2 protocol; an error's
gRPC status comes from the one error table (``protocol/v2/errors.py``), grpcio's codes for
both servers.
"""
