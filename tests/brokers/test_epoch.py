"""The epoch file (reference §2.5) and the slave's handshake decisions (reference §2.4, seed 004)."""

import os
import zlib

import pytest

import brokers.ha.epoch as epoch_module
from brokers.ha.epoch import (
    EPOCH_FILE_NAME,
    OPEN_END,
    CatchUp,
    CatchUpAction,
    EpochCache,
    EpochEntry,
    EpochFile,
    EpochFileCorrupt,
    ForkCase,
    classify_fork,
    format_checkpoint,
    parse_checkpoint,
    plan_catch_up,
)

pytestmark = pytest.mark.unit


def cache(*pairs: tuple[int, int]) -> EpochCache:
    return EpochCache(EpochEntry(e, s) for e, s in pairs)


def entries(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(e, s) for e, s in pairs]


# --- find_consistent_point ------------------------------------------------------------------------------

# (local entries, local max offset, other entries, other max offset, consistent point)
CONSISTENT_POINT_CASES = {
    "seed-004-example": ([(6, 200), (7, 1200), (8, 2250)], 2500, [(6, 200), (7, 1200), (8, 2500)], 2500, 2250),
    "identical-slave-behind": ([(1, 0), (2, 100)], 150, [(1, 0), (2, 100)], 300, 150),
    "identical-slave-ahead": ([(1, 0), (2, 100)], 300, [(1, 0), (2, 100)], 150, 150),
    "identical-same-end": ([(1, 0)], 100, [(1, 0)], 100, 100),
    "local-empty": ([], 0, [(1, 0)], 100, -1),
    "other-empty": ([(1, 0)], 100, [], 0, -1),
    "both-empty": ([], 0, [], 0, -1),
    "no-common-epoch": ([(1, 0)], 100, [(2, 0)], 50, -1),
    "same-epoch-other-start-keeps-walking": ([(1, 0), (3, 500)], 700, [(1, 0), (3, 600)], 800, 500),
    "every-common-epoch-has-another-start": ([(1, 0), (2, 10)], 50, [(1, 5), (2, 20)], 60, -1),
    "old-master-rejoins-ahead": ([(1, 0)], 100, [(1, 0), (2, 60)], 90, 60),
    "local-epoch-unknown-to-other": ([(1, 0), (2, 100)], 300, [(1, 0), (3, 150)], 400, 100),
    "other-has-later-epochs": ([(1, 0), (2, 100)], 150, [(1, 0), (2, 100), (3, 200)], 300, 150),
    "local-ended-its-epoch-earlier": ([(1, 0), (2, 100), (4, 180)], 250, [(1, 0), (2, 100), (3, 200)], 300, 180),
    "empty-last-epoch-on-both": ([(1, 0), (2, 100)], 100, [(1, 0), (2, 100)], 100, 100),
}


@pytest.mark.parametrize(
    ("local", "local_end", "other", "other_end", "expected"),
    list(CONSISTENT_POINT_CASES.values()),
    ids=list(CONSISTENT_POINT_CASES),
)
def test_find_consistent_point(local, local_end, other, other_end, expected):
    point = cache(*local).find_consistent_point(local_end, entries(*other), other_end)
    assert point == expected
    assert point <= min(local_end, other_end)


def test_find_consistent_point_accepts_another_cache():
    master = cache((6, 200), (7, 1200), (8, 2500))
    assert cache((6, 200), (7, 1200), (8, 2250)).find_consistent_point(2500, master, 2500) == 2250


def test_find_consistent_point_rejects_a_disordered_epoch_list():
    with pytest.raises(ValueError, match="out of order"):
        cache((1, 0)).find_consistent_point(10, entries((2, 5), (1, 9)), 20)


# --- seed 004's six cases -------------------------------------------------------------------------------

MASTER = (300, 2500)  # master min, master max

# (slave min, slave max, case) against MASTER
FORK_CASES = {
    "1-1": (0, 200, ForkCase.CASE_1_1),
    "1-1-slave-max-at-master-min": (0, 300, ForkCase.CASE_1_1),
    "1-2": (100, 1000, ForkCase.CASE_1_2),
    "1-2-seed-004-example": (300, 2500, ForkCase.CASE_1_2),
    "2-2": (400, 2000, ForkCase.CASE_2_2),
    "2-2-slave-max-at-master-max": (400, 2500, ForkCase.CASE_2_2),
    "1-3": (300, 2600, ForkCase.CASE_1_3),
    "2-3": (301, 2600, ForkCase.CASE_2_3),
    "2-3-slave-min-at-master-max": (2500, 2600, ForkCase.CASE_2_3),
    "3-3": (2600, 3000, ForkCase.CASE_3_3),
}


@pytest.mark.parametrize(("slave_min", "slave_max", "expected"), list(FORK_CASES.values()), ids=list(FORK_CASES))
def test_classify_fork(slave_min, slave_max, expected):
    assert classify_fork(slave_min, slave_max, *MASTER) is expected


def test_the_six_cases_are_named_as_in_the_seed():
    assert [c.value for c in ForkCase] == ["1-1", "1-2", "2-2", "1-3", "2-3", "3-3"]


def test_an_empty_master_has_no_interval_2():
    assert classify_fork(0, 0, 0, 0) is ForkCase.CASE_1_1
    assert classify_fork(0, 10, 0, 0) is ForkCase.CASE_1_3
    assert classify_fork(5, 10, 0, 0) is ForkCase.CASE_3_3


def test_classify_fork_rejects_inverted_logs():
    with pytest.raises(ValueError):
        classify_fork(10, 5, 0, 100)
    with pytest.raises(ValueError):
        classify_fork(0, 5, 100, 0)


A = CatchUpAction
C = ForkCase
# (slave min, slave max, consistent point, expected) against MASTER
CATCH_UP_CASES = {
    "1-1-discard-and-start-at-master-min": (0, 200, -1, CatchUp(C.CASE_1_1, A.START_FROM_MASTER_MIN, 300)),
    "1-1-even-with-a-consistent-point": (0, 300, 300, CatchUp(C.CASE_1_1, A.START_FROM_MASTER_MIN, 300)),
    "1-2-follow": (100, 1000, 1000, CatchUp(C.CASE_1_2, A.FOLLOW, 1000)),
    "1-2-seed-004-example-truncates-the-fork": (300, 2500, 2250, CatchUp(C.CASE_1_2, A.TRUNCATE, 2250)),
    "1-2-fork-below-master-min": (0, 1000, 200, CatchUp(C.CASE_1_2, A.START_FROM_MASTER_MIN, 300)),
    "1-2-fork-at-master-min": (0, 1000, 300, CatchUp(C.CASE_1_2, A.TRUNCATE, 300)),
    "1-2-no-common-epoch": (100, 1000, -1, CatchUp(C.CASE_1_2, A.REFUSE, -1)),
    "2-2-follow": (400, 2000, 2000, CatchUp(C.CASE_2_2, A.FOLLOW, 2000)),
    "2-2-fork-in-shared-range": (400, 2000, 1500, CatchUp(C.CASE_2_2, A.TRUNCATE, 1500)),
    "2-2-fork-below-slave-min": (400, 2000, 350, CatchUp(C.CASE_2_2, A.TRUNCATE, 350)),
    "2-2-no-epochs-empty-log-follows": (1000, 1000, None, CatchUp(C.CASE_2_2, A.FOLLOW, 1000)),
    "2-2-no-epochs-with-bytes-refused": (400, 2000, None, CatchUp(C.CASE_2_2, A.REFUSE, -1)),
    "1-3-truncate-at-master-max": (300, 2600, 2500, CatchUp(C.CASE_1_3, A.TRUNCATE, 2500)),
    "1-3-truncate-the-fork": (0, 2600, 1200, CatchUp(C.CASE_1_3, A.TRUNCATE, 1200)),
    "1-3-no-common-epoch": (0, 2600, -1, CatchUp(C.CASE_1_3, A.REFUSE, -1)),
    "2-3-truncate-the-fork": (400, 2600, 2250, CatchUp(C.CASE_2_3, A.TRUNCATE, 2250)),
    "2-3-no-epochs": (400, 2600, None, CatchUp(C.CASE_2_3, A.REFUSE, -1)),
    "3-3-manual-intervention": (2600, 3000, -1, CatchUp(C.CASE_3_3, A.REFUSE, -1)),
    "3-3-even-with-a-point": (2600, 3000, 2500, CatchUp(C.CASE_3_3, A.REFUSE, -1)),
}


@pytest.mark.parametrize(("slave_min", "slave_max", "point", "expected"), list(CATCH_UP_CASES.values()), ids=list(CATCH_UP_CASES))
def test_plan_catch_up(slave_min, slave_max, point, expected):
    assert plan_catch_up(slave_min, slave_max, *MASTER, point) == expected


def test_plan_catch_up_of_a_brand_new_replica_starts_at_master_min():
    assert plan_catch_up(0, 0, 0, 0, None) == CatchUp(C.CASE_1_1, A.START_FROM_MASTER_MIN, 0)
    assert plan_catch_up(0, 0, 0, 500, None) == CatchUp(C.CASE_1_1, A.START_FROM_MASTER_MIN, 0)


def test_plan_catch_up_rejects_a_point_beyond_a_log_end():
    with pytest.raises(ValueError, match="beyond a log end"):
        plan_catch_up(0, 2600, *MASTER, 2550)


def test_actions_compare_equal_to_their_names():
    assert {a.value for a in CatchUpAction} == {"START_FROM_MASTER_MIN", "FOLLOW", "TRUNCATE", "REFUSE"}
    assert CatchUpAction.REFUSE == "REFUSE"


# --- append and truncate (§2.5) -------------------------------------------------------------------------


def test_empty_cache():
    empty = EpochCache()
    assert (empty.entries, empty.last_epoch(), empty.last_entry(), empty.first_entry(), len(empty)) == ((), -1, None, None, 0)
    assert empty.find_entry_by_offset(0) is None


@pytest.mark.parametrize(
    ("entry", "accepted"),
    [
        pytest.param((3, 200), True, id="both-greater"),
        pytest.param((2, 200), False, id="same-epoch"),
        pytest.param((1, 200), False, id="older-epoch"),
        pytest.param((3, 100), False, id="same-start"),
        pytest.param((3, 50), False, id="earlier-start"),
    ],
)
def test_append_needs_a_strictly_greater_epoch_and_start(entry, accepted):
    epochs = cache((1, 0), (2, 100))
    assert epochs.append(EpochEntry(*entry)) is accepted
    assert epochs.entries == tuple(entries((1, 0), (2, 100), *([entry] if accepted else [])))


def test_the_first_entry_may_start_anywhere():
    for start in (0, 4096):
        epochs = EpochCache()
        assert epochs.append(EpochEntry(5, start))
        assert epochs.last_epoch() == 5 and epochs.last_entry() == EpochEntry(5, start)


def test_entries_are_never_negative():
    with pytest.raises(ValueError):
        EpochEntry(-1, 0)
    with pytest.raises(ValueError):
        EpochEntry(1, -5)


def test_constructor_rejects_disorder():
    with pytest.raises(ValueError, match="out of order"):
        cache((2, 0), (2, 10))


def test_end_of_is_the_next_start_or_the_log_end():
    epochs = cache((1, 0), (2, 100), (3, 250))
    assert epochs.end_of(EpochEntry(1, 0), 400) == 100
    assert epochs.end_of(EpochEntry(2, 100), 400) == 250
    assert epochs.end_of(EpochEntry(3, 250), 400) == 400
    assert epochs.end_of(EpochEntry(3, 250)) == OPEN_END
    with pytest.raises(ValueError):
        epochs.end_of(EpochEntry(3, 251), 400)


def test_find_entry_by_offset():
    epochs = cache((1, 0), (2, 100), (3, 250))
    assert epochs.find_entry_by_offset(0, 400) == EpochEntry(1, 0)
    assert epochs.find_entry_by_offset(99, 400) == EpochEntry(1, 0)
    assert epochs.find_entry_by_offset(100, 400) == EpochEntry(2, 100)
    assert epochs.find_entry_by_offset(399, 400) == EpochEntry(3, 250)
    assert epochs.find_entry_by_offset(400, 400) is None
    assert epochs.find_entry_by_offset(10**12) == EpochEntry(3, 250)  # the last entry is open-ended
    assert cache((2, 100)).find_entry_by_offset(50) is None
    assert epochs.find_entry_by_epoch(2) == EpochEntry(2, 100) and epochs.find_entry_by_epoch(4) is None


@pytest.mark.parametrize(
    ("epoch", "kept"),
    [(4, [(1, 0), (2, 100), (3, 250)]), (3, [(1, 0), (2, 100)]), (2, [(1, 0)]), (0, [])],
)
def test_truncate_suffix_by_epoch_drops_that_epoch_and_later(epoch, kept):
    epochs = cache((1, 0), (2, 100), (3, 250))
    assert epochs.truncate_suffix_by_epoch(epoch) == 3 - len(kept)
    assert epochs.entries == tuple(entries(*kept))


@pytest.mark.parametrize(
    ("offset", "kept"),
    [(251, [(1, 0), (2, 100), (3, 250)]), (250, [(1, 0), (2, 100)]), (101, [(1, 0), (2, 100)]), (100, [(1, 0)]), (0, [])],
)
def test_truncate_suffix_by_offset_drops_entries_starting_at_or_after(offset, kept):
    epochs = cache((1, 0), (2, 100), (3, 250))
    epochs.truncate_suffix_by_offset(offset)
    assert epochs.entries == tuple(entries(*kept))


@pytest.mark.parametrize(
    ("offset", "kept"),
    [(99, [(1, 0), (2, 100), (3, 250)]), (100, [(2, 100), (3, 250)]), (250, [(3, 250)]), (10**9, [(3, 250)])],
)
def test_truncate_prefix_by_offset_drops_entries_ending_at_or_before(offset, kept):
    epochs = cache((1, 0), (2, 100), (3, 250))
    epochs.truncate_prefix_by_offset(offset)
    assert epochs.entries == tuple(entries(*kept))


def test_appending_after_a_suffix_truncation():
    epochs = cache((1, 0), (2, 100), (3, 250))
    epochs.truncate_suffix_by_offset(200)
    assert epochs.append(EpochEntry(4, 200))
    assert epochs.entries == tuple(entries((1, 0), (2, 100), (4, 200)))


# --- EpochFile ------------------------------------------------------------------------------------------


def test_a_new_store_has_no_epochs_and_no_file(tmp_path):
    epochs = EpochFile.in_store(tmp_path)
    assert epochs.path == tmp_path / EPOCH_FILE_NAME == tmp_path / "epochFileCheckpoint"
    assert epochs.entries == () and not epochs.path.exists()


def test_round_trip_in_the_checkpoint_format(tmp_path):
    path = tmp_path / "store" / EPOCH_FILE_NAME
    epochs = EpochFile(path)
    for epoch, start in ((1, 0), (2, 100), (3, 250)):
        assert epochs.append(EpochEntry(epoch, start))
    body = "1-0\n2-100\n3-250\n"
    crc = zlib.crc32(body.encode()) & 0x7FFFFFFF
    assert path.read_text() == f"3\n{crc}\n{body}"
    assert (tmp_path / "store" / (EPOCH_FILE_NAME + ".bak")).read_text() == path.read_text()
    assert EpochFile(path).entries == epochs.entries


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda e: e.append(EpochEntry(4, 400)), id="append"),
        pytest.param(lambda e: e.truncate_suffix_by_epoch(2), id="truncate_suffix_by_epoch"),
        pytest.param(lambda e: e.truncate_suffix_by_offset(250), id="truncate_suffix_by_offset"),
        pytest.param(lambda e: e.truncate_prefix_by_offset(100), id="truncate_prefix_by_offset"),
        pytest.param(lambda e: e.clear(), id="clear"),
    ],
)
def test_every_mutation_is_on_disk_when_it_returns(tmp_path, mutate):
    path = tmp_path / EPOCH_FILE_NAME
    epochs = EpochFile(path)
    for epoch, start in ((1, 0), (2, 100), (3, 250)):
        epochs.append(EpochEntry(epoch, start))
    mutate(epochs)
    assert EpochFile(path).entries == epochs.entries
    path.unlink()
    assert EpochFile(path).entries == epochs.entries  # the .bak copy too


def test_a_rejected_append_writes_nothing(tmp_path, monkeypatch):
    epochs = EpochFile(tmp_path / EPOCH_FILE_NAME)
    epochs.append(EpochEntry(2, 100))
    writes = []
    monkeypatch.setattr(epoch_module, "_write_atomically", lambda path, content: writes.append(path))
    assert not epochs.append(EpochEntry(2, 200))
    assert epochs.truncate_suffix_by_offset(500) == 0
    assert writes == []


def _written(tmp_path, *pairs):
    epochs = EpochFile(tmp_path / EPOCH_FILE_NAME)
    for epoch, start in pairs:
        epochs.append(EpochEntry(epoch, start))
    return epochs.path, epochs.backup_path


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda p: p.unlink(), id="missing"),
        pytest.param(lambda p: p.write_text(""), id="empty"),
        pytest.param(lambda p: p.write_text(p.read_text().replace("2-100", "2-101")), id="crc-mismatch"),
        pytest.param(lambda p: p.write_text("3" + p.read_text()[1:].replace("2-100\n", "")), id="count-mismatch"),
        pytest.param(lambda p: p.write_text(p.read_text()[:-3]), id="torn-tail"),
        pytest.param(lambda p: p.write_bytes(b"\xff\xfe\x00garbage"), id="garbage"),
    ],
)
def test_a_corrupt_primary_falls_back_to_the_bak(tmp_path, damage):
    path, _ = _written(tmp_path, (1, 0), (2, 100))
    damage(path)
    assert EpochFile(path).entries == tuple(entries((1, 0), (2, 100)))


def test_both_copies_corrupt_is_a_clear_error(tmp_path):
    path, backup = _written(tmp_path, (1, 0), (2, 100))
    path.write_text("2\n12345\n1-0\n2-100\n")
    backup.write_text("nonsense")
    with pytest.raises(EpochFileCorrupt, match="no usable epoch checkpoint") as excinfo:
        EpochFile(path)
    assert str(path) in str(excinfo.value) and str(backup) in str(excinfo.value)


def test_a_corrupt_primary_without_a_bak_is_an_error(tmp_path):
    path, backup = _written(tmp_path, (1, 0))
    backup.unlink()
    path.write_text("1\n0\nnot-an-entry\n")
    with pytest.raises(EpochFileCorrupt):
        EpochFile(path)


def test_a_missing_primary_with_a_corrupt_bak_is_an_error(tmp_path):
    path, backup = _written(tmp_path, (1, 0))
    path.unlink()
    backup.write_text("1\n")
    with pytest.raises(EpochFileCorrupt):
        EpochFile(path)


def test_a_torn_temporary_file_is_ignored(tmp_path):
    path, _ = _written(tmp_path, (1, 0), (2, 100))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("3\n99\n1-0\n2-1")  # a crash in the middle of writing the next version
    epochs = EpochFile(path)
    assert epochs.entries == tuple(entries((1, 0), (2, 100)))
    assert epochs.append(EpochEntry(3, 200))
    assert not tmp.exists()
    assert EpochFile(path).entries == tuple(entries((1, 0), (2, 100), (3, 200)))


def test_a_crash_before_the_rename_leaves_the_old_entries(tmp_path, monkeypatch):
    path, _ = _written(tmp_path, (1, 0))
    epochs = EpochFile(path)

    def crash(src, dst):
        raise OSError("power cut")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="power cut"):
        epochs.append(EpochEntry(2, 100))
    monkeypatch.undo()
    assert epochs.entries == tuple(entries((1, 0)))  # memory follows the disk
    assert EpochFile(path).entries == tuple(entries((1, 0)))


def test_a_crash_between_the_copies_leaves_the_new_entries(tmp_path, monkeypatch):
    path, backup = _written(tmp_path, (1, 0))
    epochs = EpochFile(path)
    real = epoch_module._write_atomically

    def write(target, content):
        if target == backup:
            raise OSError("power cut")
        real(target, content)

    monkeypatch.setattr(epoch_module, "_write_atomically", write)
    with pytest.raises(OSError):
        epochs.append(EpochEntry(2, 100))
    monkeypatch.undo()
    assert EpochFile(path).entries == tuple(entries((1, 0), (2, 100)))


def test_checkpoint_text_round_trip_and_unchecked_crc():
    listed = entries((1, 0), (7, 1200))
    assert parse_checkpoint(format_checkpoint(listed)) == listed
    assert parse_checkpoint("2\n0\n1-0\n7-1200\n") == listed  # CRC 0: not checked
    assert parse_checkpoint(format_checkpoint([])) == []
    body = "1-0\n7-1200\n"
    assert parse_checkpoint(f"2\n{zlib.crc32(body.encode())}\n{body}") == listed  # an unmasked CRC-32 is accepted


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("1\n0\n1-0", id="no-final-newline"),
        pytest.param("x\n0\n1-0\n", id="bad-count"),
        pytest.param("1\n0\n1_0\n", id="bad-line"),
        pytest.param("1\n0\n-1-0\n", id="negative-epoch"),
        pytest.param("2\n0\n2-0\n1-10\n", id="out-of-order"),
        pytest.param("2\n0\n1-0\n", id="count-mismatch"),
    ],
)
def test_parse_checkpoint_rejects(text):
    with pytest.raises(EpochFileCorrupt):
        parse_checkpoint(text)
