"""The inputs and outputs of a route's targets must agree: a client sends one request to the
route and cannot know which target answers it.

A model's signature is what its config declares: each input and output by name, with its
datatype and shape (``-1`` first when the model batches, as its metadata shows). Targets on
one model (versions of it) share its config, so only targets on different models are
compared. A target whose model has no config yet (not read or loaded) is compared once it has
one (:class:`SignatureCheck`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from inferplex.config.model_config import ModelConfig, TensorConfig
from inferplex.routing.config import TargetConfig

#: model -> its config now (None while the server has not read it)
ConfigOf = Callable[[str], ModelConfig | None]
#: tensor name -> (datatype, shape)
_Tensors = dict[str, tuple[str, tuple[int, ...]]]


def _tensors(config: ModelConfig, declared: Sequence[TensorConfig]) -> _Tensors:
    batch = (-1,) if config.max_batch_size > 0 else ()
    return {t.name: (t.data_type, batch + tuple(t.dims)) for t in declared}


def _show(tensor: tuple[str, tuple[int, ...]]) -> str:
    return f"{tensor[0]} {list(tensor[1])}"


def differences(first: str, a: ModelConfig, second: str, b: ModelConfig) -> list[str]:
    """What differs between the inputs and outputs of ``a`` (target ``first``) and ``b``
    (target ``second``): one phrase per tensor."""
    found = []
    for kind, left, right in (
        ("input", _tensors(a, a.input), _tensors(b, b.input)),
        ("output", _tensors(a, a.output), _tensors(b, b.output)),
    ):
        for name in sorted(left.keys() | right.keys()):
            if name not in right:
                found.append(f"{kind} '{name}' only in '{first}'")
            elif name not in left:
                found.append(f"{kind} '{name}' only in '{second}'")
            elif left[name] != right[name]:
                found.append(
                    f"{kind} '{name}' is {_show(left[name])} in '{first}' but "
                    f"{_show(right[name])} in '{second}'"
                )
    return found


class SignatureCheck:
    """Compares a route's targets as their models' configs become known or change. Cheap
    when nothing changed: one config lookup per model and an identity comparison."""

    def __init__(self, route: str, members: Sequence[TargetConfig], config_of: ConfigOf) -> None:
        self.route = route
        self._config_of = config_of
        # one target per model: versions of one model share its config
        firsts: dict[str, TargetConfig] = {}
        for target in members:
            firsts.setdefault(target.model, target)
        self._targets = list(firsts.values()) if len(firsts) > 1 else []
        self._seen: tuple[ModelConfig | None, ...] = ()
        #: why the route is refused ("" while its known targets agree)
        self.error = ""

    def check(self) -> str:
        """The error naming the route, two targets and what differs; "" when every target
        known so far agrees with the first known one."""
        if not self._targets:
            return ""
        configs = tuple(self._config_of(t.model) for t in self._targets)
        if configs != self._seen:  # identical configs compare by identity: no deep compare
            self._seen = configs
            self.error = self._compare(configs)
        return self.error

    def _compare(self, configs: tuple[ModelConfig | None, ...]) -> str:
        known = [(t, c) for t, c in zip(self._targets, configs, strict=True) if c is not None]
        if not known:
            return ""
        (first, reference), *others = known
        for target, config in others:
            found = differences(first.name, reference, target.name, config)
            if found:
                return (
                    f"route '{self.route}': targets '{first.name}' and '{target.name}' have "
                    f"different inputs or outputs, so a request to the route would get a "
                    f"different answer depending on the target picked: {'; '.join(found)}"
                )
        return ""
