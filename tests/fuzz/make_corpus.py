#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/ (a handful of small valid
inputs each). Run from anywhere; rerunning rewrites the same files. Crash inputs added as regressions
(corpus/<target>/regression-*) are kept."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = 0x31524843


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---- frame_fuzz: 64-byte header, the expectation (struct Expect), an optional Abort payload ----
def header(kind, op, dtype, rop, algo, flags, root, step, src, seq, count, length, tag):
    # The checksum is left 0: seeds set Expect.mode bit 0, so the harness recomputes it.
    return struct.pack("<IBBBBBBHiIiQQQQII", MAGIC, kind, op, dtype, rop, algo, flags, 0, root, step, src, seq,
                       count, length, tag, 0, 0)


def expect(mode, op, dtype, rop, algo, has_rop, root, step, seq, count, length, tag):
    # struct Expect: u8 mode, 5 x u8, 2 bytes padding, i32 root, u32 step, 4 x u64 (seq, count, length, tag).
    return struct.pack("<6B2xiIQQQQ", mode, op, dtype, rop, algo, has_rop, root, step, seq, count, length, tag)


T = 0x0123456789ABCDEF
# all_reduce #5, float32 (dtype 8 is arbitrary here: the check compares codes), sum, ring, step 2, 4096 bytes.
ok = header(1, 1, 8, 0, 1, 1, -1, 2, 1, 5, 1024, 4096, T)
write("frame_fuzz", "match", ok + expect(1, 1, 8, 0, 1, 1, -1, 2, 5, 1024, 4096, T))
write("frame_fuzz", "bad-checksum", ok + expect(0, 1, 8, 0, 1, 1, -1, 2, 5, 1024, 4096, T))
write("frame_fuzz", "foreign-tag", ok + expect(1, 1, 8, 0, 1, 1, -1, 2, 5, 1024, 4096, T ^ 1))
write("frame_fuzz", "other-algo", ok + expect(1, 1, 8, 0, 7, 1, -1, 2, 5, 1024, 4096, T))
write("frame_fuzz", "other-seq", ok + expect(1, 1, 8, 0, 1, 1, -1, 2, 6, 1024, 4096, T))
write("frame_fuzz", "other-length", ok + expect(1, 1, 8, 0, 1, 1, -1, 2, 5, 1024, 2048, T))
bcast = header(1, 2, 0, 0, 2, 0, 3, 0, 3, 9, 7, 7, T)
write("frame_fuzz", "broadcast-root", bcast + expect(1, 2, 0, 0, 2, 0, 3, 0, 9, 7, 7, T))
msg = b"rank 2 aborted: out of memory"
abort = header(3, 0, 0, 0, 0, 0, -1, 0, 2, 0, 0, 8 + len(msg), T)
write("frame_fuzz", "abort-payload",
      abort + expect(1, 1, 8, 0, 1, 1, -1, 0, 0, 0, 0, T) + struct.pack("<ii", 4, 2) + msg)
write("frame_fuzz", "header-only", ok)


# ---- store_request_fuzz: requests as TcpStore sends them (big-endian, u32-length strings) ----
def s(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack(">I", len(b)) + b


write("store_request_fuzz", "set", b"\x01" + s("chorus/c0/tag") + s(b"\x01\x02\x03\x04\x05\x06\x07\x08"))
write("store_request_fuzz", "get", b"\x02" + struct.pack(">Q", 30000) + s("chorus/c0/addr/1"))
write("store_request_fuzz", "add", b"\x03" + s("chorus/create/0") + struct.pack(">q", 1))
write("store_request_fuzz", "add-negative", b"\x03" + s("counter") + struct.pack(">q", -5))
write("store_request_fuzz", "check", b"\x04" + struct.pack(">I", 2) + s("a") + s("b"))
write("store_request_fuzz", "wait", b"\x05" + struct.pack(">QI", 1000, 3) + s("k0") + s("k1") + s("k2"))
write("store_request_fuzz", "erase", b"\x06" + s("chorus/c0/tag"))
write("store_request_fuzz", "pipelined",
      b"\x01" + s("x") + s("1") + b"\x03" + s("x") + struct.pack(">q", 2) + b"\x02" + struct.pack(">Q", 0) + s("x"))
write("store_request_fuzz", "partial", b"\x01" + s("key")[:5])
write("store_request_fuzz", "key-too-long", b"\x06" + struct.pack(">I", 4097))
write("store_request_fuzz", "unknown-command", b"\x07")

# ---- tuning_fuzz: tuning files as chorus-tune writes them ----
entry = {"world_size": 2, "alpha_us": 6.0, "overhead_us": 1.0, "beta_ns_per_byte": 0.2, "gamma_ns_per_byte": 0.3,
         "algorithms": {"allreduce/ring": {"latency": 1.2, "bandwidth": 0.9,
                                           "corrections": [[8.0, 0.93], [4096.0, 1.1], [1048576.0, 0.97]]}}}
write("tuning_fuzz", "small", json.dumps({"chorus_tuning": 1, "transports": {"tcp": [entry]}}, indent=1))
write("tuning_fuzz", "two-transports", json.dumps(
    {"chorus_tuning": 1, "transports": {"inproc": [dict(entry, algorithms={})],
                                        "shm": [entry, dict(entry, world_size=8)]}}))
measured = dict(entry, algorithms={"allreduce/tree": {"latency": 1.0, "bandwidth": 1.0, "corrections": [],
                                                     "measured": [[8.0, 2.1e-05], [65536.0, 9.5e-05],
                                                                  [16777216.0, 0.0123]]}})
write("tuning_fuzz", "measured", json.dumps({"chorus_tuning": 1, "transports": {"shm": [measured]}}, indent=1))
write("tuning_fuzz", "empty", '{"chorus_tuning": 1, "transports": {}}')
write("tuning_fuzz", "wrong-version", '{"chorus_tuning": 2, "transports": {}}')
write("tuning_fuzz", "out-of-range", json.dumps(
    {"chorus_tuning": 1, "transports": {"tcp": [dict(entry, alpha_us=-1)]}}))
