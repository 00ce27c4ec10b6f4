"""Consumer offsets and their DataVersion (reference §5.4)."""

import pytest

from brokers.store.offsets import ConsumerOffsets, DataVersion

pytestmark = pytest.mark.unit


def test_data_version_advances_every_500_commits_with_the_state_version(tmp_path):
    offsets = ConsumerOffsets(tmp_path / "consumerOffset.json")
    offsets.state_version = 7  # the master epoch in controller mode
    for i in range(499):
        offsets.commit("g", "T", 0, i)
    assert offsets.data_version == DataVersion()
    offsets.commit("g", "T", 0, 499)
    assert (offsets.data_version.state_version, offsets.data_version.counter) == (7, 1)
    for i in range(500):
        offsets.commit("g", "T", 1, i)
    assert offsets.data_version.counter == 2


def test_offsets_survive_a_restart(tmp_path):
    path = tmp_path / "consumerOffset.json"
    offsets = ConsumerOffsets(path, step=2)
    offsets.commit("g", "T", 3, 41)
    offsets.commit("g", "T", 3, 42)
    offsets.persist()
    again = ConsumerOffsets(path)
    assert again.get("g", "T", 3) == 42 and again.data_version == offsets.data_version
    assert again.get("g", "T", 4) is None


def test_data_versions_compare_by_state_version_then_counter():
    assert DataVersion(2, 0, 0) > DataVersion(1, 99, 99) and DataVersion(1, 2, 0) > DataVersion(1, 1, 5)
