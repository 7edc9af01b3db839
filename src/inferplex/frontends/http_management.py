"""The HTTP frontend's management endpoints (repository, routes, shared-memory regions),
the V2 app's handlers of ``(model, version, body, header length, principal)``: a part of
:class:`~inferplex.frontends.http.HttpApp`, kept apart from its inference path."""

from __future__ import annotations

from typing import Any

import orjson

from inferplex.engine.inference import InferenceEngine
from inferplex.errors import InvalidInputError, UnsupportedError
from inferplex.frontends.management_json import ManagementBodies, load_parameters
from inferplex.security.tokens import Principal
from inferplex.shm import CUDA_UNSUPPORTED, cuda_status

Headers = list[tuple[bytes, bytes]]
#: a request body: a large one is a memoryview of the buffer the server read it into
Body = bytes | memoryview
#: status, body, headers other than content-length
Reply = tuple[int, bytes, Headers]

JSON: Headers = [(b"content-type", b"application/json")]
EMPTY_OK: Reply = (200, b"", [])


def json_reply(document: Any) -> Reply:
    return 200, orjson.dumps(document), JSON


class ManagementRoutes:
    """The management handlers; the app provides the engine and the body reader."""

    _engine: InferenceEngine
    _bodies: ManagementBodies

    async def _repository_index(self, _model: str, _version: str, body: Body, *_: Any) -> Reply:
        ready_only = (await self._bodies.json(body, "index")).get("ready", False)
        if not isinstance(ready_only, bool):
            raise InvalidInputError("index request field 'ready' must be true or false")
        return json_reply(self._engine.repository_index(ready_only))

    async def _model_load(self, model: str, _version: str, body: Body, *_: Any) -> Reply:
        parameters = load_parameters(await self._bodies.json(body, "load"), "load")
        await self._engine.load_model(model, parameters)
        return EMPTY_OK

    async def _model_unload(self, model: str, _version: str, body: Body, *_: Any) -> Reply:
        parameters = load_parameters(await self._bodies.json(body, "unload"), "unload")
        await self._engine.unload_model(model, parameters)
        return EMPTY_OK

    async def _model_instances(self, model: str, _version: str, body: Body, *_: Any) -> Reply:
        options = await self._bodies.json(body, "instances")
        if "count" not in options:
            raise InvalidInputError('the instances request needs "count", e.g. {"count": 2}')
        await self._engine.set_instance_count(model, options["count"])
        return EMPTY_OK

    async def _model_default_version(self, model: str, _version: str, body: Body, *_: Any) -> Reply:
        options = await self._bodies.json(body, "default_version")
        if "version" not in options:
            raise InvalidInputError(
                'the default_version request needs "version", e.g. {"version": "2"}'
            )
        self._engine.set_default_version(model, options["version"])
        return EMPTY_OK

    async def _repository_memory(self, *_: Any) -> Reply:
        return json_reply(self._engine.memory())

    async def _route_listing(self, *_: Any) -> Reply:
        return json_reply(self._engine.route_listing())

    async def _route_stats(self, route: str, *_: Any) -> Reply:
        return json_reply(self._engine.route_statistics(route))

    # -- system shared memory (docs/shared_memory.md): the region name comes as ``model``;
    # -- each acts on the caller's own regions
    async def _shm_register(
        self, region: str, _version: str, body: Body, _length: Any, principal: Principal
    ) -> Reply:
        options = await self._bodies.json(body, "register")
        unknown = set(options) - {"key", "offset", "byte_size"}
        if unknown or type(options.get("key")) is not str or "byte_size" not in options:
            raise InvalidInputError(
                'the register request must be {"key": "/object", "offset": 0, "byte_size": N}'
                f" (offset optional), got {sorted(options)}"
            )
        self._engine.shared_memory.owned_by(principal).register(
            region, options["key"], options.get("offset", 0), options["byte_size"]
        )
        return EMPTY_OK

    async def _shm_unregister(
        self, region: str, _version: str, _body: Body, _length: Any, principal: Principal
    ) -> Reply:
        self._engine.shared_memory.owned_by(principal).unregister(region)
        return EMPTY_OK

    async def _shm_status(
        self, region: str, _version: str, _body: Body, _length: Any, principal: Principal
    ) -> Reply:
        return json_reply(self._engine.shared_memory.owned_by(principal).status(region))

    async def _cuda_shm_register(self, *_: Any) -> Reply:
        raise UnsupportedError(CUDA_UNSUPPORTED)

    async def _cuda_shm_status(self, region: str, *_: Any) -> Reply:
        return json_reply(cuda_status(region))

    async def _cuda_shm_unregister(self, *_: Any) -> Reply:
        return EMPTY_OK  # nothing can have been registered
