"""Fault tests of the replication log layer, with real processes and real files, counting what
was acknowledged, lost and duplicated:

- a process appending as a leader in epochs 0 and 1, truncating as a follower does, appending as a
  follower in epoch 2 (``append_as_follower``) and as a leader again in epoch 3 is SIGKILLed
  mid-write; before reopening, the ``leader-epoch-checkpoint`` is left alone, deleted, has one
  byte flipped, or the active segment gets a torn tail.  After recovery: every acknowledged
  append is there exactly once, the torn tail is cut, the epoch cache equals the model derived
  from the batches (and from the acknowledgements);
- truncation into the middle of open and aborted transactions, followed by follower appends and a
  reload (clean and unclean): open transactions, last stable offset, aborted-transaction index
  and producer state equal a model computed from the decoded log.
"""

import os
import random
import signal
import subprocess
import sys
import textwrap

import pytest

from pyklog.broker.log import Log, LogConfig
from pyklog.broker.log.leader_epoch import LEADER_EPOCH_CHECKPOINT
from pyklog.broker.record.batch import build_batch
from tests.unit.log.support import batch_headers, epoch_model, iter_batches

SEGMENT_BYTES = 1500

CHILD = textwrap.dedent(
    """
    import random, sys
    from pyklog.broker.log import Log, LogConfig
    from pyklog.broker.record.batch import build_batch

    d, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    lg = Log(d, LogConfig(segment_bytes=%d))
    leader = Log(d + "-leader/t-0", LogConfig(segment_bytes=%d))   # the leader of epoch 2

    def ack(kind, info, epoch):
        print(kind, info.first_offset, info.last_offset, epoch, flush=True)

    def batch(n, **kw):
        return build_batch([(b"k%%d" %% rng.randint(0, 9), b"v" * rng.randint(1, 40), None, ())
                            for _ in range(n)], **kw)

    # epochs 0 and 1 as leader
    for epoch in (0, 1):
        for _ in range(rng.randint(20, 40)):
            ack("L", lg.append(batch(rng.randint(1, 4)), leader_epoch=epoch), epoch)
    # became follower of a leader that had less of epoch 1: truncate (KIP-101)
    cut = lg.log_end_offset - rng.randint(1, 20)
    lg.truncate_to(cut)
    print("T", lg.log_end_offset, lg.log_end_offset, -1, flush=True)
    # the leader's epoch-2 records, copied with their offsets and epochs
    leader.truncate_fully_and_start_at(lg.log_end_offset)
    for _ in range(rng.randint(20, 40)):
        leader.append(batch(rng.randint(1, 4)), leader_epoch=2)
        data = leader.read_bytes(lg.log_end_offset, 1 << 20)
        ack("F", lg.append_as_follower(data), 2)
    # leader again in epoch 3, until killed
    lg.assign_epoch_start_offset(3)
    while True:
        ack("L", lg.append(batch(rng.randint(1, 4)), leader_epoch=3), 3)
"""
    % (SEGMENT_BYTES, SEGMENT_BYTES)
)


def run_child_until(tmp_path, d, seed, phase, n):
    """Run the child; SIGKILL it once it acknowledged its ``n``-th append of ``phase`` ("F":
    follower appends of epoch 2, "L3": leader appends of epoch 3).  Returns the acknowledged
    appends still meant to be in the log: (first, last, epoch)."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen([sys.executable, str(script), d, str(seed)], stdout=subprocess.PIPE, text=True)
    lines = []
    seen = 0
    try:
        for line in child.stdout:
            lines.append(line)
            kind, epoch = line.split()[0], line.split()[-1]
            if (phase == "F" and kind == "F") or (phase == "L3" and kind == "L" and epoch == "3"):
                seen += 1
                if seen >= n:
                    break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    lines += child.stdout.read().splitlines(keepends=True)
    child.stdout.close()
    acked = []
    for line in lines:
        parts = line.split()
        if len(parts) != 4 or not line.endswith("\n"):
            continue  # a line cut by the kill is not an acknowledgement
        kind, first, last, epoch = parts[0], int(parts[1]), int(parts[2]), int(parts[3])
        if kind == "T":  # truncation: acknowledged appends at or above the cut are gone by design
            acked = [a for a in acked if a[1] < first]
        else:
            acked.append((first, last, epoch))
    return acked


@pytest.mark.parametrize("damage", ["none", "delete", "flip", "flip2", "torn_tail"])
@pytest.mark.parametrize("phase,seed", [("F", 11), ("L3", 12)])
def test_sigkill_mid_write_then_damaged_epoch_checkpoint(tmp_path, damage, phase, seed):
    d = str(tmp_path / "t-0")
    rng = random.Random(f"{seed}-{damage}")
    acked = run_child_until(tmp_path, d, seed, phase, rng.randint(1, 15))
    assert acked[-1][2] >= 2  # killed after the truncation, in the follower or the second leader phase
    cp = os.path.join(d, LEADER_EPOCH_CHECKPOINT)
    before_file = open(cp, "rb").read()
    if damage == "delete":
        os.unlink(cp)
    elif damage.startswith("flip"):  # the hard case: one digit of an entry changed, the file still parses
        raw = bytearray(before_file)
        entries_from = raw.index(b"\n", raw.index(b"\n") + 1) + 1
        digits = [i for i in range(entries_from, len(raw)) if chr(raw[i]).isdigit()]
        i = rng.choice(digits)
        raw[i] = ord(rng.choice([c for c in "0123456789" if ord(c) != raw[i]]))
        open(cp, "wb").write(bytes(raw))
    elif damage == "torn_tail":
        last = sorted(f for f in os.listdir(d) if f.endswith(".log"))[-1]
        with open(os.path.join(d, last), "ab") as f:
            f.write(build_batch([(b"k", b"torn" * 30, None, ())], base_offset=acked[-1][1] + 1)[:70])
    lg = Log(d, LogConfig(segment_bytes=SEGMENT_BYTES), clean_shutdown=False, recovery_point=0)
    try:
        hdrs = batch_headers(lg)
        bases = [h[0] for h in hdrs]
        assert len(set(bases)) == len(bases) and bases == sorted(bases)  # no duplicate, in order
        by_base = {h[0]: h for h in hdrs}
        lost = [a for a in acked if by_base.get(a[0]) != a]
        assert lost == [], lost
        in_flight = len(hdrs) - len(acked)
        assert in_flight in (0, 1), (len(hdrs), len(acked))  # the append in flight may have landed
        if damage == "torn_tail":
            assert lg.last_recovery.cuts, "the torn tail must be cut"
        # the epoch cache equals the model from the batches and from the acknowledgements
        want = epoch_model(hdrs)
        assert [tuple(e) for e in lg.leader_epoch_cache.epoch_entries()] == want
        assert epoch_model(acked) == want[: len(epoch_model(acked))]
        assert [
            tuple(e)
            for e in Log(
                d, LogConfig(segment_bytes=SEGMENT_BYTES), clean_shutdown=True
            ).leader_epoch_cache.epoch_entries()
        ] == want  # and the rewritten file says the same
        print(
            f"seed {seed} {phase} {damage}: {len(acked)} acknowledged, lost 0, duplicated 0, in flight "
            f"{in_flight}, epochs {want}, {len(lg.segments)} segments, cuts {len(lg.last_recovery.cuts)}"
        )
    finally:
        lg.close()


# --------------------------------------------------------------------------- truncation and transactions


def txn_model(lg):
    """Independent model from the decoded log: open transactions {pid: first offset}, aborted
    [(pid, first, marker offset)], the producers' (epoch, last sequence) and the LSO (with HW =
    LEO: the log is not replicated here)."""
    open_, aborted, producers = {}, [], {}
    for b in iter_batches(lg):
        h = b.header
        if h.producer_id < 0:
            continue
        if h.is_control:
            if h.producer_id in open_:
                first = open_.pop(h.producer_id)
                if b.control_type == 0:
                    aborted.append((h.producer_id, first, h.base_offset))
            continue
        if h.is_transactional:
            open_.setdefault(h.producer_id, h.base_offset)
        producers[h.producer_id] = (h.producer_epoch, h.base_sequence + h.last_offset_delta)
    lso = min(open_.values()) if open_ else lg.log_end_offset
    return open_, sorted(aborted), producers, lso


def txn_state(lg):
    producers = {}
    for pid in range(1, 5):
        e = lg.producer_state(pid)
        if e is not None and e.batches:
            producers[pid] = (e.epoch, e.last_seq)
    aborted = sorted(
        (t.producer_id, t.first_offset, t.last_offset) for t in lg.collect_aborted_txns(0, lg.log_end_offset)
    )
    return lg.open_transactions(), aborted, producers, lg.last_stable_offset


@pytest.mark.parametrize("seed", range(6))
def test_truncation_into_transactions_then_follower_appends_and_reload(tmp_path, seed):
    """Leader log with interleaved transactions (committed, aborted, open), idempotent and plain
    batches over several segments (producer snapshots at each roll); a follower copies it, is
    truncated at a random point (often inside an open or aborted transaction), copies the rest
    again from a leader that continued differently, and is reloaded cleanly and uncleanly (with
    its .txnindex files deleted): every time its state equals the model of its decoded batches."""
    rng = random.Random(seed)
    cfg = LogConfig(segment_bytes=900)
    leader = Log(str(tmp_path / "l-0"), cfg)
    seqs = {}
    open_ = set()

    def step(lg, epoch):
        pid = rng.randint(1, 4)
        r = rng.random()
        if pid in open_ and r < 0.3:
            lg.append_control_marker(pid, 0, rng.random() < 0.5, 0, leader_epoch=epoch)
            open_.discard(pid)
            return
        n = rng.randint(1, 3)
        s = seqs.get(pid, 0)
        txn = pid in open_ or r < 0.6
        if pid not in open_ and not txn and rng.random() < 0.3:
            lg.append(build_batch([(b"p", b"x", None, ())]), leader_epoch=epoch)
            return
        lg.append(
            build_batch(
                [(b"k", b"v%d" % i, None, ()) for i in range(n)],
                producer_id=pid,
                producer_epoch=0,
                base_sequence=s,
                is_transactional=txn,
            ),
            leader_epoch=epoch,
        )
        seqs[pid] = s + n
        if txn:
            open_.add(pid)

    for _ in range(60):
        step(leader, 0)
    follower = Log(str(tmp_path / "f-0"), cfg)
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(leader.read_bytes(follower.log_end_offset, 1 << 20))
    assert txn_state(follower) == txn_model(follower) == txn_state(leader)
    assert len(follower.segments) > 2

    # the follower is truncated to a random batch boundary (a new leader had less)
    hdrs = batch_headers(follower)
    cut = rng.choice(hdrs[len(hdrs) // 3 :])[0]
    follower.truncate_to(cut)
    assert follower.log_end_offset == cut
    assert txn_state(follower) == txn_model(follower)

    # the new leader: the same prefix, then its own continuation in epoch 1
    new_leader = Log(str(tmp_path / "n-0"), cfg)
    while new_leader.log_end_offset < cut:
        new_leader.append_as_follower(leader.read_bytes(new_leader.log_end_offset, 1 << 20)[:])
        if new_leader.log_end_offset > cut:
            new_leader.truncate_to(cut)
    open_.clear()
    o, _a, _p, _l = txn_model(new_leader)
    open_.update(o)
    seqs = {pid: st[1] + 1 for pid, st in txn_model(new_leader)[2].items()}
    new_leader.assign_epoch_start_offset(1)
    for _ in range(30):
        step(new_leader, 1)
    while follower.log_end_offset < new_leader.log_end_offset:
        follower.append_as_follower(new_leader.read_bytes(follower.log_end_offset, 1 << 20))
    assert batch_headers(follower) == batch_headers(new_leader)
    want = txn_model(follower)
    assert txn_state(follower) == want == txn_state(new_leader)
    assert [tuple(e) for e in follower.leader_epoch_cache.epoch_entries()] == epoch_model(batch_headers(follower))
    follower.close()

    for clean in (True, False):
        if not clean:
            for name in os.listdir(tmp_path / "f-0"):
                if name.endswith(".txnindex"):
                    os.unlink(tmp_path / "f-0" / name)
        lg = Log(str(tmp_path / "f-0"), cfg, clean_shutdown=clean, recovery_point=0)
        assert txn_state(lg) == want, clean
        lg.close()
