"""The lifecycle's records and their one way to change state: ``ModelRecords.transition``
checks each change against the allowed ones, logs it, counts it and publishes it to the
registry in one step with the served versions."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest

from inferplex.config.model_config import ModelConfig
from inferplex.core.model import ModelVersion
from inferplex.core.registry import ModelRegistry, ModelState, ModelStatus
from inferplex.core.snapshot import TransitionCount
from inferplex.lifecycle.reading import VersionFacts
from inferplex.lifecycle.records import (
    ALLOWED,
    Measured,
    ModelRecord,
    ModelRecords,
    Transition,
    TransitionError,
)

S = ModelState
LOGGER = "inferplex.lifecycle.records"


class FakeVersion:
    """What the registry reads of a served version."""

    def __init__(self, name: str, version: int) -> None:
        self.config = ModelConfig(name=name)
        self.version_str = str(version)
        self.in_flight = 0


def served(name: str, *numbers: int) -> dict[int, ModelVersion]:
    return {n: cast(ModelVersion, FakeVersion(name, n)) for n in numbers}


#: a way from UNAVAILABLE (a new record's state) to each state, through allowed changes only
PATHS: dict[ModelState, tuple[ModelState, ...]] = {
    S.UNAVAILABLE: (),
    S.LOADING: (S.LOADING,),
    S.READY: (S.LOADING, S.READY),
    S.UNLOADING: (S.LOADING, S.READY, S.UNLOADING),
}


def in_state(records: ModelRecords, name: str, state: ModelState) -> ModelRecord:
    record = records.add(name)
    for step in PATHS[state]:
        versions = served(name, 1) if step is S.READY else {} if step is S.UNLOADING else None
        records.transition(record, step, versions=versions)
    assert record.state is state
    return record


def test_a_new_record_is_unavailable_and_not_loaded() -> None:
    registry = ModelRegistry()
    record = ModelRecords(registry).add("m")
    assert (record.state, record.reason) == (S.UNAVAILABLE, "not loaded")
    assert registry.entry("m").status == ModelStatus()
    assert registry.index() == [
        {"name": "m", "version": "", "state": "UNAVAILABLE", "reason": "not loaded"}
    ]


@pytest.mark.parametrize("target", list(S))
@pytest.mark.parametrize("source", list(S))
def test_a_transition_is_made_published_and_counted_only_where_allowed(
    source: ModelState, target: ModelState
) -> None:
    registry = ModelRegistry()
    records = ModelRecords(registry)
    record = in_state(records, "m", source)
    status, counts = registry.entry("m").status, records.transitions.copy()
    if target in ALLOWED[source]:
        records.transition(record, target, "why")
        assert (record.state, record.reason) == (target, "why")
        entry = registry.entry("m")
        assert (entry.state, entry.reason) == (target, "why")
        assert records.transitions - counts == {Transition(source, target): 1}
        return
    with pytest.raises(TransitionError, match=f"cannot go from {source.value} to {target.value}"):
        records.transition(record, target, "why")
    assert record.state is source and registry.entry("m").status is status
    assert records.transitions == counts


def test_the_model_cannot_skip_loading_or_unloading() -> None:
    records = ModelRecords(ModelRegistry())
    record = records.add("m")
    with pytest.raises(TransitionError):  # serving without a load
        records.transition(record, S.READY, versions=served("m", 1))
    assert not record.entry.versions  # nothing was published
    ready = in_state(records, "r", S.READY)
    with pytest.raises(TransitionError):  # leaving without draining
        records.transition(ready, S.UNAVAILABLE, "unloaded")
    assert ready.entry.versions


def test_versions_and_status_are_published_in_one_step() -> None:
    """A listener of the registry's status signal (gRPC health Watch) sees the served
    versions and the READY state together, never one without the other."""
    registry = ModelRegistry()
    records = ModelRecords(registry)
    record = in_state(records, "m", S.LOADING)
    seen: list[tuple[bool, str]] = []
    registry.status.listen(lambda: seen.append((registry.ready("m"), registry.entry("m").reason)))
    records.transition(record, S.READY, versions=served("m", 1, 2))
    assert seen == [(True, "")]
    assert registry.route("m").version_str == "2"
    records.transition(record, S.UNLOADING, versions={})
    assert seen[-1] == (False, "")
    assert not registry.entry("m").versions


def test_a_failed_load_shows_in_the_index_and_in_strict_readiness() -> None:
    registry = ModelRegistry()
    records = ModelRecords(registry)
    record = in_state(records, "m", S.LOADING)
    records.transition(record, S.UNAVAILABLE, "version 2: bad", failed={2: "version 2: bad"})
    assert registry.index() == [
        {"name": "m", "version": "2", "state": "UNAVAILABLE", "reason": "version 2: bad"}
    ]
    assert not registry.entry("m").status.load_failed  # not marked an error
    records.transition(record, S.UNAVAILABLE, "bad config", error=True)
    assert registry.entry("m").status.load_failed and not registry.all_ready()
    records.transition(record, S.UNAVAILABLE, "unloaded")  # an unload clears it
    assert registry.all_ready()
    ready = in_state(records, "r", S.READY)
    reason = "reload failed, the previous version(s) go on serving: version 1: bad"
    records.transition(ready, S.READY, reason, failed={1: "version 1: bad"}, error=True)
    status = registry.entry("r").status
    assert not status.load_failed and status.failed == {1: "version 1: bad"}
    assert registry.ready("r") and not registry.all_ready()  # it serves, the reload failed


def test_each_transition_is_logged_with_its_fields(caplog: pytest.LogCaptureFixture) -> None:
    records = ModelRecords(ModelRegistry())
    record = records.add("m")
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        records.transition(record, S.LOADING)
        records.transition(record, S.UNAVAILABLE, "no file", error=True)
        records.transition(record, S.LOADING)
        records.transition(record, S.READY, versions=served("m", 1), detail="versions 1")
        records.transition(record, S.READY)  # a reload that changed nothing
        records.transition(record, S.READY, "reload failed: x", error=True)
        records.transition(record, S.UNLOADING, detail="shutdown", versions={})
        records.transition(record, S.UNAVAILABLE, "unloaded")
    logged = [
        (r.levelno, r.getMessage(), cast(Any, r).model, cast(Any, r).previous, cast(Any, r).state)
        for r in caplog.records
    ]
    assert logged == [
        (logging.INFO, "model 'm' LOADING", "m", "UNAVAILABLE", "LOADING"),
        (logging.ERROR, "model 'm' failed to load: no file", "m", "LOADING", "UNAVAILABLE"),
        (logging.INFO, "model 'm' LOADING", "m", "UNAVAILABLE", "LOADING"),
        (logging.INFO, "model 'm' READY (versions 1)", "m", "LOADING", "READY"),
        (logging.DEBUG, "model 'm' READY", "m", "READY", "READY"),
        (logging.ERROR, "model 'm': reload failed: x", "m", "READY", "READY"),
        (logging.INFO, "model 'm' UNLOADING (shutdown)", "m", "READY", "UNLOADING"),
        (logging.INFO, "model 'm' UNAVAILABLE (unloaded)", "m", "UNLOADING", "UNAVAILABLE"),
    ]
    assert cast(Any, caplog.records[1]).reason == "no file"


def test_transitions_are_counted_by_from_and_to() -> None:
    records = ModelRecords(ModelRegistry())
    for name in ("a", "b"):
        in_state(records, name, S.READY)
    records.transition(records.record("b"), S.UNLOADING, versions={})
    assert records.counts() == (
        TransitionCount("LOADING", "READY", 2),
        TransitionCount("READY", "UNLOADING", 1),
        TransitionCount("UNAVAILABLE", "LOADING", 2),
    )


def test_a_record_is_forgotten_with_its_entry_only_while_nothing_serves() -> None:
    registry = ModelRegistry()
    records = ModelRecords(registry)
    in_state(records, "serving", S.READY)
    records.add("gone")
    records.forget("serving")
    records.forget("gone")
    assert [r.name for r in records.all()] == ["serving"]
    assert [e.name for e in registry.entries()] == ["serving"]


def test_the_estimate_of_a_load_follows_the_files_measured() -> None:
    record = ModelRecords(ModelRegistry()).add("m")
    facts = {1: VersionFacts("f1", 100), 2: VersionFacts("f2", 200)}
    assert record.estimate([1, 2], facts) == 300  # never measured: the files' size
    record.measured[1] = Measured("f1", 900)  # as a load measured it
    assert record.estimate([1, 2], facts) == 1100
    changed = {1: VersionFacts("f1b", 100)}
    assert record.estimate([1], changed) == 100  # other files: measured no more
