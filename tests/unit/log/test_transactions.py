"""Transactions in the log (KIP-98): open transactions, markers, the last stable offset, the
aborted-transaction index (.txnindex), producer snapshots with transaction state, recovery
after SIGKILL, truncation and retention.  Real segment files, no server; batches from
pyklog.broker.record.batch."""

import os
import random
import signal
import subprocess
import sys
import textwrap

import pytest

from pyklog.broker.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from pyklog.broker.log import Log, LogConfig
from pyklog.broker.log.txn_index import ABORTED_TXN, AbortedTxn, TransactionIndex
from pyklog.broker.record.batch import build_batch, build_control_batch, decode_batch


def txn_batch(pid, seq, n=1, epoch=0, key=b"k", ts=None):
    return build_batch(
        [(key, b"v%d" % (seq + i), ts, ()) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )


def plain_batch(n=1, ts=None):
    return build_batch([(b"p", b"x", ts, ()) for _ in range(n)])


def scan(lg):
    """Independent model over the decoded log: (open {pid: first}, aborted [(pid, first,
    last)], committed-record offsets, aborted-record offsets, every batch header)."""
    open_, aborted, committed, aborted_recs, headers = {}, [], [], [], []
    pending: dict[int, list[int]] = {}
    off = lg.log_start_offset
    while off < lg.log_end_offset:
        data = lg.read(off, 1 << 20).read_bytes()
        pos = 0
        while pos < len(data):
            b = decode_batch(data, pos)
            h = b.header
            headers.append(h)
            pos += h.size
            off = h.next_offset
            if h.is_control:
                ctype = b.control_type
                if h.producer_id in open_:
                    first = open_.pop(h.producer_id)
                    recs = pending.pop(h.producer_id)
                    if ctype == 0:
                        aborted.append((h.producer_id, first, h.base_offset))
                        aborted_recs += recs
                    else:
                        committed += recs
            elif h.is_transactional:
                open_.setdefault(h.producer_id, h.base_offset)
                pending.setdefault(h.producer_id, []).extend(r.offset for r in b.records)
            else:
                committed += [r.offset for r in b.records]
    return open_, aborted, committed, aborted_recs, headers


def expected_lso(lg, open_):
    return min(open_.values()) if open_ else lg.log_end_offset


def overlapping(aborted, start, upper):
    return sorted((p, f) for p, f, last in aborted if last >= start and f < upper)


# --------------------------------------------------------------------------- basics


def test_marker_moves_lso_and_abort_is_indexed(tmp_path):
    lg = Log(str(tmp_path / "t-0"))
    assert lg.last_stable_offset == 0 and lg.open_transactions() == {}
    lg.append(plain_batch())  # 0
    lg.append(txn_batch(7, 0, n=2))  # 1-2 open txn of 7
    lg.append(txn_batch(8, 0))  # 3 open txn of 8
    lg.append(plain_batch())  # 4
    assert lg.last_stable_offset == 1
    assert lg.open_transactions() == {7: 1, 8: 3}
    info = lg.append_control_marker(7, 0, False, 5)  # 5 abort 7
    assert (info.first_offset, info.last_offset) == (5, 5)
    assert lg.last_stable_offset == 3 and lg.open_transactions() == {8: 3}
    assert lg.aborted_transactions(0, lg.log_end_offset) == [(7, 1)]
    # the entry: lastStableOffset when written = the other open transaction's first offset
    assert lg.active_segment.txn_index.entries == [AbortedTxn(7, 1, 5, 3)]
    lg.append_control_marker(8, 0, True, 5)  # 6 commit 8
    assert lg.last_stable_offset == 7 == lg.log_end_offset
    assert lg.aborted_transactions(0, 7) == [(7, 1)]
    assert lg.aborted_transactions(3, 7) == [(7, 1)]  # ends at 5 >= 3
    assert lg.aborted_transactions(6, 7) == []  # ended before the range
    assert lg.aborted_transactions(0, 1) == []  # starts at the bound
    # the marker batch on disk: control + transactional, base sequence -1, Kafka's record layout
    _, _, _, _, headers = scan(lg)
    m = headers[4]
    assert m.is_control and m.is_transactional and m.base_sequence == -1
    assert (m.producer_id, m.producer_epoch) == (7, 0)
    raw = lg.read_bytes(5, 1000)
    rec = decode_batch(raw).records[0]
    assert rec.key == b"\x00\x00\x00\x00" and rec.value == b"\x00\x00\x00\x00\x00\x05"
    lg.close()


def test_txnindex_bytes_golden(tmp_path):
    assert ABORTED_TXN.size == 34
    entry = AbortedTxn(0x0102030405060708, 10, 20, 21)
    assert entry.encode() == bytes.fromhex("00000102030405060708000000000000000a00000000000000140000000000000015")
    lg = Log(str(tmp_path / "t-0"))
    lg.append(txn_batch(3, 0, n=3))  # 0-2
    lg.append_control_marker(3, 0, False, 1)  # 3
    lg.append(txn_batch(4, 0))  # 4
    lg.append(txn_batch(3, 3))  # 5
    lg.append_control_marker(3, 0, False, 1)  # 6: 4 still open -> lastStableOffset 4
    path = str(tmp_path / "t-0" / "00000000000000000000.txnindex")
    with open(path, "rb") as f:
        assert f.read() == bytes.fromhex(
            "0000"
            "0000000000000003"
            "0000000000000000"
            "0000000000000003"
            "0000000000000004"
            "0000"
            "0000000000000003"
            "0000000000000005"
            "0000000000000006"
            "0000000000000004"
        )
    lg.close()


def test_commit_does_not_touch_the_index_and_empty_markers_are_written(tmp_path):
    d = tmp_path / "t-0"
    lg = Log(str(d))
    info = lg.append_control_marker(9, 0, False, 0)  # no open transaction: written, no entry
    assert info.first_offset == 0 and lg.log_end_offset == 1
    assert lg.aborted_transactions(0, 10) == [] and lg.last_stable_offset == 1
    assert not os.path.exists(d / "00000000000000000000.txnindex")
    lg.append(txn_batch(9, 0))
    lg.append_control_marker(9, 0, True, 0)
    lg.append_control_marker(9, 0, True, 0)  # a retried marker: harmless
    assert lg.aborted_transactions(0, 10) == [] and lg.last_stable_offset == 4
    assert not os.path.exists(d / "00000000000000000000.txnindex")
    lg.close()


def test_errors(tmp_path):
    lg = Log(str(tmp_path / "t-0"))
    # clients may not write markers
    with pytest.raises(InvalidRecordError, match="control batches"):
        lg.append(build_control_batch(1, 5, 0))
    lg.append(txn_batch(5, 0, epoch=2))
    # non-transactional write while the transaction is open (Kafka: InvalidTxnStateException)
    plain_idem = build_batch([(b"k", b"v", 1, ())], producer_id=5, producer_epoch=2, base_sequence=1)
    with pytest.raises(InvalidTxnStateError, match="transactional"):
        lg.append(plain_idem)
    # a zombie's transactional batch
    with pytest.raises(InvalidProducerEpochError):
        lg.append(txn_batch(5, 0, epoch=1))
    # markers: an older producer epoch, then an older coordinator epoch
    with pytest.raises(InvalidProducerEpochError):
        lg.append_control_marker(5, 1, True, 4)
    lg.append_control_marker(5, 2, False, 4)
    with pytest.raises(TransactionCoordinatorFencedError):
        lg.append_control_marker(5, 2, False, 3)
    assert lg.log_end_offset == 2  # nothing of the refused appends was written
    for bad in ((-1, 0, 0), (5, 1 << 15, 0), (5, 2, 1 << 31), (1 << 63, 0, 0)):
        with pytest.raises(InvalidRecordError):
            lg.append_control_marker(bad[0], bad[1], True, bad[2])
    with pytest.raises(InvalidProducerEpochError):  # Kafka: -1 is just an older epoch
        lg.append_control_marker(5, -1, True, 4)
    # a marker from the broker through append(from_client=False) is the same as append_control_marker
    lg.append(txn_batch(5, 1, epoch=2))
    lg.append(bytearray(build_control_batch(0, 5, 2, coordinator_epoch=4)), from_client=False)
    assert lg.aborted_transactions(0, 10) == [(5, 0), (5, 2)] and lg.open_transactions() == {}
    lg.close()


def test_coordinator_appends_skip_sequences_but_not_epochs(tmp_path):
    """The offset manager writes TxnOffsetCommit records with the producer's id/epoch and base
    sequence 0 or -1 every time (Kafka's AppendOrigin.COORDINATOR)."""
    lg = Log(str(tmp_path / "t-0"))
    for seq in (0, 0, -1, 0):
        info = lg.append(
            build_batch(
                [(b"g", b"o", 1, ())], producer_id=11, producer_epoch=3, base_sequence=seq, is_transactional=True
            ),
            from_client=False,
        )
        assert not info.duplicate
    assert lg.log_end_offset == 4 and lg.open_transactions() == {11: 0}
    with pytest.raises(InvalidProducerEpochError):
        lg.append(
            build_batch(
                [(b"g", b"o", 1, ())], producer_id=11, producer_epoch=2, base_sequence=0, is_transactional=True
            ),
            from_client=False,
        )
    lg.append_control_marker(11, 3, True, 0)
    assert lg.last_stable_offset == 5
    lg.close()


def test_marker_with_a_newer_epoch_ends_the_transaction(tmp_path):
    """The coordinator aborts a timed-out transaction with the bumped epoch."""
    lg = Log(str(tmp_path / "t-0"))
    lg.append(txn_batch(6, 0, epoch=0))
    lg.append_control_marker(6, 1, False, 0)
    assert lg.open_transactions() == {} and lg.aborted_transactions(0, 5) == [(6, 0)]
    with pytest.raises(InvalidProducerEpochError):
        lg.append(txn_batch(6, 1, epoch=0))  # the old producer is fenced
    lg.append(txn_batch(6, 0, epoch=1))
    assert lg.open_transactions() == {6: 2}
    lg.close()


# --------------------------------------------------------------------------- model


def run_random(lg, rng, ops, pids=(1, 2, 3, 4), roll_every=None, check=True):
    seq = dict.fromkeys(pids, 0)
    open_ = {}
    aborted = []
    for i in range(ops):
        r = rng.random()
        p = rng.choice(pids)
        if r < 0.45:
            n = rng.randint(1, 3)
            info = lg.append(txn_batch(p, seq[p], n=n, key=b"k%d" % rng.randint(0, 5)))
            seq[p] += n
            open_.setdefault(p, info.first_offset)
        elif r < 0.6:
            lg.append(plain_batch(rng.randint(1, 2)))
        elif r < 0.95:
            commit = rng.random() < 0.5
            info = lg.append_control_marker(p, 0, commit, 0)
            if p in open_:
                first = open_.pop(p)
                if not commit:
                    aborted.append((p, first, info.first_offset))
        else:
            lg.roll()
        if roll_every and i % roll_every == roll_every - 1:
            lg.roll()
        if check:
            assert lg.open_transactions() == open_
            assert lg.last_stable_offset == (min(open_.values()) if open_ else lg.log_end_offset)
    return open_, aborted


@pytest.mark.parametrize("seed", range(6))
def test_random_interleavings_against_a_model(tmp_path, seed):
    rng = random.Random(seed)
    lg = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=rng.choice([400, 1500, 1 << 20])))
    open_, aborted = run_random(lg, rng, 300)
    leo = lg.log_end_offset
    assert len(lg.segments) > 1 or lg.config.segment_bytes > 10000
    for _ in range(200):
        a = rng.randint(0, leo)
        b = rng.randint(a, leo + 1)
        assert sorted(lg.aborted_transactions(a, b)) == overlapping(aborted, a, b), (a, b)
    # the model agrees with a scan of the log's own bytes
    s_open, s_aborted, *_ = scan(lg)
    assert s_open == open_ and s_aborted == aborted
    lg.close()


# --------------------------------------------------------------------------- restarts


def state(lg):
    return (
        lg.log_end_offset,
        lg.last_stable_offset,
        lg.open_transactions(),
        lg.aborted_transactions(0, lg.log_end_offset),
    )


def test_restart_clean_and_from_log_only(tmp_path):
    d = str(tmp_path / "t-0")
    rng = random.Random(42)
    lg = Log(d, LogConfig(segment_bytes=700))
    _open, _aborted = run_random(lg, rng, 200)
    lg.append(txn_batch(99, 0))  # an open transaction at close
    before = state(lg)
    assert 99 in before[2] and before[3]
    lg.close()
    # clean: snapshot + index files
    lg = Log(d, LogConfig(segment_bytes=700), clean_shutdown=True)
    assert state(lg) == before
    lg.close()
    # without snapshots the producer state is replayed from the log (markers included)
    for name in os.listdir(d):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(d, name))
    lg = Log(d, LogConfig(segment_bytes=700), clean_shutdown=True)
    assert state(lg) == before
    lg.close()
    # unclean from offset 0 with every .txnindex gone: recovery rebuilds them
    for name in os.listdir(d):
        if name.endswith(".txnindex"):
            os.unlink(os.path.join(d, name))
    lg = Log(d, LogConfig(segment_bytes=700), clean_shutdown=False, recovery_point=0)
    assert state(lg) == before
    # the rebuilt entries equal the ones written at append time, lastStableOffset included
    lg.close()


def test_unclean_restart_from_a_recovery_point_rebuilds_later_indexes(tmp_path):
    d = str(tmp_path / "t-0")
    rng = random.Random(7)
    lg = Log(d, LogConfig(segment_bytes=600))
    run_random(lg, rng, 250)
    before = state(lg)
    entries = {s.base_offset: list(s.txn_index.entries) for s in lg.segments}
    mid = lg.segments[len(lg.segments) // 2].base_offset
    lg.close()
    for name in os.listdir(d):  # the later indexes are lost; a snapshot at mid survives at most
        if name.endswith(".txnindex") and int(name[:20]) >= mid:
            os.unlink(os.path.join(d, name))
    lg = Log(d, LogConfig(segment_bytes=600), clean_shutdown=False, recovery_point=mid)
    assert state(lg) == before
    assert {s.base_offset: list(s.txn_index.entries) for s in lg.segments} == entries
    lg.close()


def test_corrupt_txnindex_is_rebuilt(tmp_path):
    d = str(tmp_path / "t-0")
    lg = Log(d)
    lg.append(txn_batch(1, 0))
    lg.append_control_marker(1, 0, False, 0)
    before = state(lg)
    lg.close()
    with open(os.path.join(d, "00000000000000000000.txnindex"), "ab") as f:
        f.write(b"\x00\x01\x02")  # a torn entry
    lg = Log(d, clean_shutdown=True)
    assert state(lg) == before
    lg.close()


CHILD = textwrap.dedent(r"""
    import random, sys
    from pyklog.broker.log import Log, LogConfig
    from pyklog.broker.record.batch import build_batch
    d, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    lg = Log(d, LogConfig(segment_bytes=800, flush_interval_messages=1 << 40))
    seq = {}
    i = 0
    while True:
        p = rng.randint(1, 5)
        r = rng.random()
        if r < 0.55:
            n = rng.randint(1, 3)
            s = seq.get(p, 0)
            b = build_batch([(b"k", b"v", 1, ())] * n, producer_id=p, producer_epoch=0,
                            base_sequence=s, is_transactional=True)
            info = lg.append(b)
            seq[p] = s + n
            print("D", p, info.first_offset, info.last_offset, flush=True)
        elif r < 0.65:
            info = lg.append(build_batch([(b"p", b"x", 1, ())]))
            print("P", 0, info.first_offset, info.last_offset, flush=True)
        else:
            commit = rng.random() < 0.5
            info = lg.append_control_marker(p, 0, commit, 0)
            print("C" if commit else "A", p, info.first_offset, info.last_offset, flush=True)
        i += 1
""")


@pytest.mark.parametrize("seed", [1, 2])
def test_sigkill_recovery_keeps_lso_and_aborted_list(tmp_path, seed):
    """A process appending transactional data and markers is SIGKILLed mid-stream.  After
    recovery (indexes of every segment rebuilt, no producer snapshot newer than the last roll)
    every acknowledged append is there exactly once, and the open transactions, the LSO and the
    aborted list equal a model replayed from what the child acknowledged (plus at most the one
    append in flight)."""
    d = str(tmp_path / "t-0")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen([sys.executable, str(script), d, str(seed)], stdout=subprocess.PIPE, text=True)
    acked = []
    target = random.Random(seed).randint(300, 900)
    try:
        for line in child.stdout:
            kind, pid, first, last = line.split()
            acked.append((kind, int(pid), int(first), int(last)))
            if len(acked) >= target:
                break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # every line the child printed before it died was an acknowledged append
    for line in child.stdout.read().splitlines():
        parts = line.split()
        if len(parts) == 4:  # a line cut by the kill is not an acknowledgement
            acked.append((parts[0], int(parts[1]), int(parts[2]), int(parts[3])))
    child.stdout.close()
    assert len(acked) >= target
    # drop every .txnindex too: recovery must rebuild them from the batches
    for name in os.listdir(d):
        if name.endswith(".txnindex"):
            os.unlink(os.path.join(d, name))
    lg = Log(d, LogConfig(segment_bytes=800), clean_shutdown=False, recovery_point=0)
    assert lg.last_recovery.recovered_segments >= 1
    s_open, s_aborted, _committed, _aborted_recs, headers = scan(lg)
    # acknowledged appends: all present, none twice (offsets of the log's batches are unique)
    by_first = {h.base_offset: h for h in headers}
    assert len(by_first) == len(headers)
    lost = [a for a in acked if a[2] not in by_first or by_first[a[2]].last_offset != a[3]]
    assert lost == []
    extra = len(headers) - len(acked)
    assert extra in (0, 1)  # the append in flight at the kill may or may not have landed
    # the model of the acknowledged appends (plus the one in flight, read from the log)
    open_, aborted = {}, []
    for kind, pid, first, _last in acked:
        if kind == "D":
            open_.setdefault(pid, first)
        elif kind in "AC" and pid in open_:
            f = open_.pop(pid)
            if kind == "A":
                aborted.append((pid, f, first))
    if extra:
        h = headers[-1]
        if h.is_control:
            ctype = decode_batch(lg.read_bytes(h.base_offset, 1 << 20)).control_type
            if h.producer_id in open_:
                f = open_.pop(h.producer_id)
                if ctype == 0:
                    aborted.append((h.producer_id, f, h.base_offset))
        elif h.is_transactional:
            open_.setdefault(h.producer_id, h.base_offset)
    assert (s_open, s_aborted) == (open_, aborted)
    assert lg.open_transactions() == open_
    assert lg.last_stable_offset == expected_lso(lg, open_)
    assert sorted(lg.aborted_transactions(0, lg.log_end_offset)) == overlapping(aborted, 0, lg.log_end_offset)
    print(
        f"seed {seed}: {len(acked)} acknowledged, lost 0, duplicated 0, in flight {extra}, "
        f"{len(lg.segments)} segments, {len(aborted)} aborted, {len(open_)} open"
    )
    lg.close()


# --------------------------------------------------------------------------- truncation, retention


def test_truncation_drops_index_entries_and_reopens_transactions(tmp_path):
    lg = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=400))
    lg.append(txn_batch(1, 0))  # 0
    lg.append(txn_batch(2, 0))  # 1
    lg.append_control_marker(1, 0, False, 0)  # 2 abort 1
    lg.append(plain_batch())  # 3
    lg.append_control_marker(2, 0, False, 0)  # 4 abort 2
    assert lg.aborted_transactions(0, 5) == [(1, 0), (2, 1)] and lg.last_stable_offset == 5
    lg.truncate_to(4)
    assert lg.aborted_transactions(0, 5) == [(1, 0)]
    assert lg.open_transactions() == {2: 1} and lg.last_stable_offset == 1
    lg.truncate_to(2)
    assert lg.aborted_transactions(0, 5) == [] and lg.open_transactions() == {1: 0, 2: 1}
    assert lg.last_stable_offset == 0
    lg.close()
    lg = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=400), clean_shutdown=True)
    assert lg.open_transactions() == {1: 0, 2: 1} and lg.aborted_transactions(0, 5) == []
    lg.close()


def test_retention_and_log_start_offset(tmp_path):
    d = tmp_path / "t-0"
    lg = Log(str(d), LogConfig(segment_bytes=300, file_delete_delay_ms=0))
    lg.append(txn_batch(1, 0))  # 0
    lg.append_control_marker(1, 0, False, 0)  # 1 abort
    lg.roll()
    lg.append(txn_batch(2, 0))  # 2 open
    lg.roll()
    lg.append(plain_batch())  # 3
    assert lg.last_stable_offset == 2
    assert os.path.exists(d / "00000000000000000000.txnindex")
    lg.increment_log_start_offset(3)
    # the open transaction's data is gone below the log start: the LSO is not below it
    assert lg.last_stable_offset == 3 and lg.open_transactions() == {2: 2}
    assert lg.aborted_transactions(3, 4) == []
    lg.delete_old_segments()
    assert lg.segments[0].base_offset == 3
    assert not os.path.exists(d / "00000000000000000000.txnindex")  # went with its segment
    lg.append_control_marker(2, 0, True, 0)
    assert lg.last_stable_offset == lg.log_end_offset == 5
    lg.close()


def test_producers_with_an_open_transaction_never_expire(tmp_path):
    lg = Log(str(tmp_path / "t-0"), LogConfig(producer_id_expiration_ms=10))
    lg.append(txn_batch(1, 0, ts=1000))
    lg.append(txn_batch(2, 0, ts=1000))
    lg.append_control_marker(2, 0, True, 0)
    n = lg.expire_producers(now_ms=10**13)
    assert n == 1 and lg.producer_state(2) is None
    assert lg.open_transactions() == {1: 0} and lg.last_stable_offset == 0
    lg.close()


def test_transaction_index_unit(tmp_path):
    idx = TransactionIndex(str(tmp_path / "00000000000000000000.txnindex"), 0)
    idx.load()
    assert idx.entries == []
    idx.append(AbortedTxn(1, 0, 5, 3))  # producer 2's transaction (from 3) still open at 5
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(2, 0, 5, 6))
    idx.append(AbortedTxn(2, 3, 9, 10))
    assert idx.collect(0, 4) == ([AbortedTxn(1, 0, 5, 3), AbortedTxn(2, 3, 9, 10)], True)
    assert idx.collect(0, 3) == ([AbortedTxn(1, 0, 5, 3)], True)  # complete at entry 1
    assert idx.collect(6, 8) == ([AbortedTxn(2, 3, 9, 10)], True)
    assert idx.collect(10, 20) == ([], False)
    idx.truncate_to(9)
    idx.close()
    again = TransactionIndex(idx.path, 0)
    again.load()
    assert again.entries == [AbortedTxn(1, 0, 5, 3)]
    again.truncate_to(0)
    assert not os.path.exists(idx.path)


# --------------------------------------------------------------------------- compaction


def consumer_view(lg, upto=None):
    """[(offset, key, value)] a READ_COMMITTED consumer sees from the log start: data up to the
    LSO, minus the batches of aborted transactions (the Java consumer's algorithm over the
    broker's aborted_transactions list and the control batches)."""
    upto = lg.last_stable_offset if upto is None else upto
    aborted = sorted(lg.aborted_transactions(lg.log_start_offset, upto), key=lambda t: t[1])
    aborted_pids = set()
    out = []
    off = lg.log_start_offset
    while off < upto:
        data = lg.read(off, 1 << 20, max_offset=upto).read_bytes()
        if not data:
            break
        pos = 0
        while pos < len(data):
            b = decode_batch(data, pos)
            h = b.header
            pos += h.size
            off = h.next_offset
            while aborted and aborted[0][1] <= h.last_offset:
                aborted_pids.add(aborted.pop(0)[0])
            if h.is_control:
                if b.control_type == 0:
                    aborted_pids.discard(h.producer_id)
                continue
            if h.is_transactional and h.producer_id in aborted_pids:
                continue
            out.extend((r.offset, r.key, r.value) for r in b.records)
    return out


def latest(view):
    d = {}
    for off, k, v in view:
        d[k] = (off, v)
    return d


def compact_cfg(**kw):
    base = {
        "cleanup_policy": "compact",
        "segment_bytes": 500,
        "file_delete_delay_ms": 0,
        "min_cleanable_dirty_ratio": 0.0,
        "delete_retention_ms": 1000,
    }
    base.update(kw)
    return LogConfig(**base)


def test_cleaner_removes_aborted_records_and_keeps_committed_ones(tmp_path):
    d = str(tmp_path / "c-0")
    lg = Log(d, compact_cfg())
    seq = {}

    def tx(pid, pairs):
        s = seq.get(pid, 0)
        seq[pid] = s + len(pairs)
        lg.append(
            build_batch(
                [(k, v, None, ()) for k, v in pairs],
                producer_id=pid,
                producer_epoch=0,
                base_sequence=s,
                is_transactional=True,
            )
        )

    tx(1, [(b"a", b"a1"), (b"b", b"b1")])
    tx(2, [(b"a", b"A-aborted"), (b"c", b"C-aborted")])  # later than a1: must not shadow it
    lg.append(build_batch([(b"d", b"d1", None, ())]))
    lg.append_control_marker(1, 0, True, 0)
    lg.append_control_marker(2, 0, False, 0)
    lg.roll()
    tx(3, [(b"a", b"a3-open")])  # open: the LSO stops here
    lg.roll()
    lg.append(build_batch([(b"e", b"e1", None, ())]))
    lg.roll()
    open_seg = next(s for s in lg.segments if s.base_offset <= 7 < s.next_offset)
    open_bytes = open(open_seg.log_path, "rb").read()
    before = consumer_view(lg)
    assert latest(before) == {b"a": (0, b"a1"), b"b": (1, b"b1"), b"d": (4, b"d1")}
    now = int(open_seg.last_modified_ms)

    stats = lg.compact(now_ms=now, force=True)
    assert stats.aborted_batches_removed == 1
    after = consumer_view(lg)
    assert latest(after) == latest(before)
    _, _, _, _, headers = scan(lg)
    values = [
        r.value
        for h in headers
        if not h.is_control
        for r in decode_batch(lg.read_bytes(h.base_offset, 1 << 20)).records
        if r.offset <= h.last_offset
    ]
    assert b"A-aborted" not in values and b"C-aborted" not in values
    # data of the aborted transaction was met in this pass: its marker and index entry stay
    assert lg.aborted_transactions(0, 7) == [(2, 2)]
    # the open transaction's segment was not touched
    assert open(open_seg.log_path, "rb").read() == open_bytes
    assert lg.last_stable_offset == 7 and lg.open_transactions() == {3: 7}

    # nothing is cleanable at or beyond the LSO: the open transaction commits; producer 2
    # writes again, so its aborted batch (kept empty as its last batch) may go
    lg.append_control_marker(3, 0, True, 0)  # 9
    tx(2, [(b"h", b"h2")])  # 10
    lg.append_control_marker(2, 0, True, 0)  # 11
    lg.roll()
    before = consumer_view(lg)
    assert latest(before)[b"a"] == (7, b"a3-open")
    stats = lg.compact(now_ms=now + 10_000, force=True)
    # the empty aborted batch went in this pass, so its marker stays until the next one
    assert stats.aborted_batches_removed == 1 and stats.markers_removed == 0
    assert lg.aborted_transactions(0, lg.log_end_offset) == [(2, 2)]
    lg.append(build_batch([(b"f", b"f1", None, ())]))  # dirty again
    lg.roll()
    before = consumer_view(lg)
    # third pass past delete.retention.ms: the abort marker has no data left -> removed with
    # its index entry; the commit markers stay (records of their transactions remain)
    stats = lg.compact(now_ms=now + 10_000, force=True)
    assert stats.markers_removed == 1
    assert lg.aborted_transactions(0, lg.log_end_offset) == []
    markers = [(h.producer_id, h.base_offset) for h in scan(lg)[4] if h.is_control]
    assert markers == [(1, 5), (3, 9), (2, 11)]
    assert latest(consumer_view(lg)) == latest(before)

    # a later committed transaction overwrites b: producer 1's first transaction loses its last
    # record, then (next pass) its commit marker
    tx(1, [(b"b", b"b2")])
    lg.append_control_marker(1, 0, True, 0)
    lg.roll()
    expected = latest(consumer_view(lg))
    assert expected[b"b"][1] == b"b2"
    lg.compact(now_ms=now + 20_000, force=True)
    assert (1, 5) in [(h.producer_id, h.base_offset) for h in scan(lg)[4] if h.is_control]
    lg.append(build_batch([(b"g", b"g1", None, ())]))  # dirty again
    lg.roll()
    expected = latest(consumer_view(lg))
    lg.compact(now_ms=now + 30_000, force=True)
    assert latest(consumer_view(lg)) == expected
    markers = [(h.producer_id, h.base_offset) for h in scan(lg)[4] if h.is_control]
    assert (1, 5) not in markers and (3, 9) in markers  # a3 (txn 3) is still the latest a
    lg.close()
    # after a restart (unclean, indexes rebuilt from the cleaned segments) the same view
    lg = Log(d, compact_cfg(), clean_shutdown=False, recovery_point=0)
    assert latest(consumer_view(lg)) == expected and lg.open_transactions() == {}
    lg.close()


@pytest.mark.parametrize("seed", range(3))
def test_cleaner_random_transactions_against_the_committed_view(tmp_path, seed):
    """Seeded random transactional writes to a compacted log, cleaned at advancing times: the
    latest committed value of every key is what a read_committed consumer sees before and
    after every pass, and no aborted value ever becomes visible or stays in the log."""
    rng = random.Random(seed)
    lg = Log(str(tmp_path / "c-0"), compact_cfg(segment_bytes=rng.choice([300, 600])))
    seq, open_, aborted_vals = {}, {}, set()
    pending = {}
    t = None
    for rnd in range(6):
        for _ in range(60):
            p = rng.randint(1, 4)
            r = rng.random()
            if r < 0.5:
                k = b"k%d" % rng.randint(0, 7)
                v = b"%d-%d-%d" % (rnd, p, rng.randint(0, 1 << 30))
                s = seq.get(p, 0)
                seq[p] = s + 1
                lg.append(
                    build_batch(
                        [(k, v, None, ())], producer_id=p, producer_epoch=0, base_sequence=s, is_transactional=True
                    )
                )
                open_[p] = True
                pending.setdefault(p, []).append(v)
            elif r < 0.6:
                lg.append(build_batch([(b"k%d" % rng.randint(0, 7), b"plain", None, ())]))
            else:
                commit = rng.random() < 0.5
                lg.append_control_marker(p, 0, commit, 0)
                vals = pending.pop(p, [])
                if not commit:
                    aborted_vals.update(vals)
                open_.pop(p, None)
            if rng.random() < 0.1:
                lg.roll()
        before = latest(consumer_view(lg))
        t = (t or lg.segments[0].last_modified_ms) + rng.choice([0, 500, 5000])
        lg.compact(now_ms=t, force=True)
        after_view = consumer_view(lg)
        assert latest(after_view) == before, f"round {rnd}"
        assert not aborted_vals & {v for _, _, v in after_view}
        lso = lg.last_stable_offset
        assert lso == (min(lg.open_transactions().values()) if lg.open_transactions() else lg.log_end_offset)
    # finally every transaction ends; past the horizon the aborted values are gone from the log
    for p in list(open_):
        lg.append_control_marker(p, 0, False, 0)
        aborted_vals.update(pending.pop(p, []))
    lg.roll()
    lg.compact(now_ms=t + 10_000, force=True)
    everything = consumer_view(lg, upto=lg.log_end_offset)
    all_values = set()
    for h in scan(lg)[4]:
        if not h.is_control:
            all_values.update(r.value for r in decode_batch(lg.read_bytes(h.base_offset, 1 << 20)).records)
    assert not aborted_vals & all_values
    assert latest(everything) == latest(consumer_view(lg))
    lg.close()


def test_interrupted_swap_replaces_the_txnindex_too(tmp_path):
    """A crash after the cleaned segment became ``.swap`` (before the originals were replaced):
    start-up puts the swap in place, its ``.txnindex`` included, and drops the originals'
    index, so no stale aborted transaction survives a marker the cleaner removed."""
    import shutil

    d = str(tmp_path / "a" / "s-0")
    conf = compact_cfg(segment_bytes=100_000)
    lg = Log(d, conf)
    lg.append(
        build_batch(
            [(b"x", b"X-aborted", None, ())], producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True
        )
    )
    lg.append_control_marker(1, 0, False, 0)
    lg.append(
        build_batch([(b"x", b"x1", None, ())], producer_id=1, producer_epoch=0, base_sequence=1, is_transactional=True)
    )
    lg.append_control_marker(1, 0, True, 0)
    lg.roll()
    now = lg.segments[0].last_modified_ms
    lg.compact(now_ms=now + 10_000, force=True)  # aborted batch removed, its marker kept
    assert lg.aborted_transactions(0, 10) == [(1, 0)]
    lg.append(build_batch([(b"y", b"y1", None, ())]))
    lg.roll()
    lg.close()
    twin = str(tmp_path / "b" / "s-0")
    shutil.copytree(d, twin)
    tl = Log(twin, conf, clean_shutdown=True)
    tl.compact(now_ms=now + 20_000, force=True)  # the abort marker goes with its index entry
    expected = (consumer_view(tl), tl.aborted_transactions(0, 10), tl.log_end_offset)
    assert expected[1] == []
    first = tl.segments[0]
    tl.close()
    assert os.path.exists(os.path.join(d, "00000000000000000000.txnindex"))
    for ext in (".log", ".index", ".timeindex", ".txnindex"):
        src = first.log_path[:-4] + ext
        if os.path.exists(src):
            shutil.copy(src, os.path.join(d, os.path.basename(src) + ".swap"))
    lg = Log(d, conf, clean_shutdown=True)
    assert (consumer_view(lg), lg.aborted_transactions(0, 10), lg.log_end_offset) == expected
    assert not any(n.endswith((".swap", ".cleaned", ".deleted")) for n in os.listdir(d))
    lg.close()


def test_producer_snapshot_carries_coordinator_epoch_and_open_transaction(tmp_path):
    """Kafka's snapshot entry: producerId, epoch, lastSequence, lastOffset, offsetDelta,
    timestamp, coordinatorEpoch, currentTxnFirstOffset (here with real values)."""
    import struct

    from crc32c import crc32c

    d = tmp_path / "t-0"
    lg = Log(str(d))
    lg.append(
        build_batch(
            [(b"k", b"v", 1000, ())] * 2, producer_id=5, producer_epoch=3, base_sequence=0, is_transactional=True
        )
    )  # 0-1
    lg.append_control_marker(5, 3, True, 7)  # 2
    lg.append(
        build_batch([(b"k", b"v", 2000, ())], producer_id=5, producer_epoch=3, base_sequence=2, is_transactional=True)
    )  # 3 open
    lg.close()
    raw = open(d / "00000000000000000004.snapshot", "rb").read()
    body = struct.pack(">i", 1) + struct.pack(">qhiqiqiq", 5, 3, 2, 3, 0, 2000, 7, 3)
    assert raw == struct.pack(">hI", 1, crc32c(body)) + body
    lg = Log(str(d), clean_shutdown=True)
    e = lg.producer_state(5)
    assert (e.epoch, e.coordinator_epoch, e.current_txn_first_offset, e.last_seq) == (3, 7, 3, 2)
    assert lg.open_transactions() == {5: 3} and lg.last_stable_offset == 3
    with pytest.raises(TransactionCoordinatorFencedError):  # the coordinator epoch survived
        lg.append_control_marker(5, 3, True, 6)
    lg.close()


def test_lock_free_readers_during_appends_and_markers(tmp_path):
    """Readers (LSO, aborted list, READ_COMMITTED reads) race a writer that appends, writes
    markers and rolls: the LSO never goes back, never passes the log end, the aborted list only
    grows (earlier answers are prefixes of later ones), and reads up to the LSO return whole
    batches below it."""
    import threading

    lg = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=700))
    stop = threading.Event()
    failures = []

    def reader():
        last_lso, last_aborted = 0, []
        try:
            while not stop.is_set():
                lso = lg.last_stable_offset
                leo = lg.log_end_offset
                assert last_lso <= lso <= leo, (last_lso, lso, leo)
                aborted = lg.aborted_transactions(0, 1 << 62)
                assert aborted[: len(last_aborted)] == last_aborted
                data = lg.read(0, 1 << 20, max_offset=lso).read_bytes()
                pos = 0
                while pos < len(data):
                    b = decode_batch(data, pos)
                    assert b.header.last_offset < lso
                    pos += b.header.size
                last_lso, last_aborted = lso, aborted
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        _open, aborted = run_random(lg, random.Random(3), 500, check=False)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert failures == []
    assert sorted(lg.aborted_transactions(0, lg.log_end_offset)) == overlapping(aborted, 0, lg.log_end_offset)
    lg.close()
