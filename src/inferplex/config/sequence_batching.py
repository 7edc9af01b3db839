"""Triton's ``sequence_batching``: a stateful model's requests come in sequences, each named
by a correlation id, and the server feeds the model control inputs (start, end, ready,
correlation id) and, with implicit state, the state the previous request of the sequence
left (core/sequences.py runs it; docs/sequences.md says how).

Field names and defaults are Triton's (model_config.proto, ModelSequenceBatching).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from inferplex.config.paths import check_file_name
from inferplex.config.sections import Section as _Section
from inferplex.config.sections import normalise_datatype

#: Triton's default when max_sequence_idle_microseconds is not set (or 0)
DEFAULT_IDLE_MICROSECONDS = 1_000_000
#: the datatypes a correlation id control may have
CORRID_DATATYPES = frozenset({"UINT64", "INT64", "UINT32", "INT32", "BYTES"})

ControlKind = Literal[
    "CONTROL_SEQUENCE_START",
    "CONTROL_SEQUENCE_READY",
    "CONTROL_SEQUENCE_END",
    "CONTROL_SEQUENCE_CORRID",
]


class Control(_Section):
    """One control signal of a control input: a flag given as the (false, true) pair of
    values of one type, or (CORRID) the correlation id in ``data_type``."""

    kind: ControlKind = "CONTROL_SEQUENCE_START"
    int32_false_true: tuple[int, ...] = ()
    fp32_false_true: tuple[float, ...] = ()
    bool_false_true: tuple[bool, ...] = ()
    data_type: str = ""

    _check_datatype = field_validator("data_type", mode="before")(normalise_datatype)

    @model_validator(mode="after")
    def _one_encoding(self) -> Control:
        pairs = [
            name
            for name in ("int32_false_true", "fp32_false_true", "bool_false_true")
            if getattr(self, name)
        ]
        if self.kind == "CONTROL_SEQUENCE_CORRID":
            if pairs:
                raise ValueError(f"a CONTROL_SEQUENCE_CORRID control takes data_type, not {pairs}")
            if self.data_type not in CORRID_DATATYPES:
                allowed = ", ".join(f"TYPE_{t}" for t in sorted(CORRID_DATATYPES - {"BYTES"}))
                raise ValueError(
                    f"a CONTROL_SEQUENCE_CORRID control needs data_type {allowed} or "
                    f"TYPE_STRING, got '{self.data_type or 'none'}'"
                )
            return self
        if len(pairs) != 1 or len(getattr(self, pairs[0])) != 2:
            raise ValueError(
                f"a {self.kind} control needs exactly one of int32_false_true, "
                "fp32_false_true or bool_false_true, with two values (false, true)"
            )
        return self

    def values(self) -> tuple[Any, Any, str]:
        """A flag's (false value, true value, V2 datatype)."""
        if self.int32_false_true:
            return (*self.int32_false_true, "INT32")  # type: ignore[return-value]
        if self.fp32_false_true:
            return (*self.fp32_false_true, "FP32")  # type: ignore[return-value]
        return (*self.bool_false_true, "BOOL")  # type: ignore[return-value]


class ControlInput(_Section):
    """A model input the server fills: its name and the one control it carries."""

    name: str
    control: tuple[Control, ...] = Field(min_length=1, max_length=1)


class InitialState(_Section):
    """The state a sequence starts with: zeros, or the values of ``data_file`` in the model's
    ``initial_state/`` folder (row-major, little-endian; BYTES as 4-byte length + bytes)."""

    name: str = ""
    data_type: str = ""
    dims: tuple[int, ...] = ()
    zero_data: bool = False
    data_file: str = ""

    _check_datatype = field_validator("data_type", mode="before")(normalise_datatype)

    @field_validator("data_file")
    @classmethod
    def _file_in_folder(cls, value: str) -> str:
        return check_file_name(value, "the model's initial_state/ folder") if value else value


class State(_Section):
    """Implicit state: the model's output ``output_name`` of one request of a sequence is
    its input ``input_name`` on the next one (the first gets the initial state)."""

    input_name: str
    output_name: str
    data_type: str
    dims: tuple[int, ...] = ()
    initial_state: tuple[InitialState, ...] = Field(default=(), max_length=1)
    use_same_buffer_for_input_output: bool = False
    use_growable_memory: bool = False

    _check_datatype = field_validator("data_type", mode="before")(normalise_datatype)


class StrategyDirect(_Section):
    max_queue_delay_microseconds: int = Field(default=0, ge=0)
    minimum_slot_utilization: float = Field(default=0.0, ge=0.0, le=1.0)


class StrategyOldest(_Section):
    max_candidate_sequences: int = Field(default=0, ge=0)
    preferred_batch_size: tuple[int, ...] = ()
    max_queue_delay_microseconds: int = Field(default=0, ge=0)
    preserve_ordering: bool = False


class SequenceBatching(_Section):
    """The sequence batcher of a stateful model (Triton's default strategy: direct)."""

    max_sequence_idle_microseconds: int = Field(default=0, ge=0)
    control_input: tuple[ControlInput, ...] = ()
    direct: StrategyDirect | None = None
    oldest: StrategyOldest | None = None
    state: tuple[State, ...] = ()
    iterative_sequence: bool = False

    @model_validator(mode="after")
    def _check(self) -> SequenceBatching:
        if self.direct is not None and self.oldest is not None:
            raise ValueError("set one strategy, direct or oldest, not both")
        if self.iterative_sequence:
            raise ValueError(
                "iterative_sequence (requests rescheduled by the model) is not supported"
            )
        kinds = [c.control[0].kind for c in self.control_input]
        repeated = sorted({k for k in kinds if kinds.count(k) > 1})
        if repeated:
            raise ValueError(f"each control kind may be given once; repeated: {repeated}")
        return self

    @property
    def idle_seconds(self) -> float:
        """How long a sequence may go without a request before it is ended."""
        return (self.max_sequence_idle_microseconds or DEFAULT_IDLE_MICROSECONDS) * 1e-6

    @property
    def server_inputs(self) -> frozenset[str]:
        """The model inputs the server fills (controls and states): no client sends them."""
        return frozenset([c.name for c in self.control_input] + [s.input_name for s in self.state])

    @property
    def state_outputs(self) -> frozenset[str]:
        """The model outputs that are the next request's state: no client gets them."""
        return frozenset(s.output_name for s in self.state)
