"""murmur2 as the Java Kafka client computes it: the hash behind its default partitioner, which
every producer here is configured with (`murmur2_random` in librdkafka), so one key lands on one
partition whichever client sent it. Pure code: a role needs no second Kafka client library loaded
to know where a key goes."""

from __future__ import annotations

SEED = 0x9747B28C
M = 0x5BD1E995
MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """The 32-bit murmur2 of `data`, as an unsigned int (the Java client's int, bit for bit)."""
    length = len(data)
    h = (SEED ^ length) & MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * M) & MASK
        k ^= k >> 24
        k = (k * M) & MASK
        h = ((h * M) & MASK) ^ k
    tail = data[whole:]
    if tail:
        for shift, byte in reversed(list(enumerate(tail))):
            h ^= byte << (8 * shift)
        h = (h * M) & MASK
    h ^= h >> 13
    h = (h * M) & MASK
    h ^= h >> 15
    return h


def partition_of(key: bytes, partitions: int) -> int:
    """The partition a message keyed `key` goes to among `partitions`."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
