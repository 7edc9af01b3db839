"""Network frontends: the V2 HTTP/REST app and the gRPC server, each built by a factory."""
