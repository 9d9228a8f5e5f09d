"""Helpers shared by the log-layer tests of leader epochs: what the batches of a log say, read back
through the log's own read path, and the leader-epoch cache an independent reader derives from them."""

from pyklog.broker.record.batch import decode_batch


def iter_batches(lg):
    """Every batch of ``lg``, decoded (CRC checked), read through ``Log.read_bytes`` one segment
    per read, as Fetch does."""
    off = lg.log_start_offset
    while off < lg.log_end_offset:
        data = lg.read_bytes(off, 1 << 24)
        pos = 0
        while pos < len(data):
            b = decode_batch(data, pos)
            pos += b.header.size
            off = b.header.last_offset + 1
            yield b


def batch_headers(lg) -> list[tuple[int, int, int]]:
    """(base offset, last offset, partitionLeaderEpoch) of every batch of ``lg``."""
    return [(b.header.base_offset, b.header.last_offset, b.header.partition_leader_epoch) for b in iter_batches(lg)]


def epoch_model(hdrs) -> list[tuple[int, int]]:
    """The (epoch, start offset) entries a leader-epoch cache must hold for these batch headers:
    each epoch starts at the first batch that carries it, epochs only grow, -1 is no epoch."""
    out = []
    for base, _last, e in hdrs:
        if e >= 0 and (not out or e > out[-1][0]):
            out.append((e, base))
    return out
