"""Row 1: the hashes a signed load has to do, measured alone (the files warm in the page cache).

Modes (the JSON argument's ``mode``):
  sha256   hashlib.sha256 over the whole file ``path`` (a signed library), read in 1 MiB pieces:
           what a signed load of a library must at least do
  chunked  the chunked SHA-256 of every array of the weight file ``path`` (as
           modpack.weights.chunked_sha256: the SHA-256 of the concatenated SHA-256 digests of
           its 4 MiB chunks), the chunks hashed on a ThreadPoolExecutor of os.cpu_count()
           threads through a read-only mapping of the file; checks each digest against the
           file's record
"""

from __future__ import annotations

import hashlib
import mmap
import os
from concurrent.futures import ThreadPoolExecutor

import _common as c

from modpack.weights import format as wf

PIECE = 1 << 20


def sha256(a: dict) -> dict:
    buf = bytearray(PIECE)
    view = memoryview(buf)
    t0 = c.now()
    h = hashlib.sha256()
    total = 0
    with open(a["path"], "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
            total += n
    digest = h.hexdigest()
    return {"hash_s": c.now() - t0, "bytes": total, "digest": digest}


def chunked(a: dict) -> dict:
    threads = os.cpu_count() or 1
    t0 = c.now()
    with open(a["path"], "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m, \
            ThreadPoolExecutor(threads) as pool:
        view = memoryview(m)
        try:
            header = wf.HEADER.unpack_from(view, 0)
            header_size, count = header[3], header[5]
            records = [wf.RECORD.unpack_from(view, header_size + i * wf.RECORD_SIZE)
                       for i in range(count)]
            # (data_offset, data_size) -> chunk digests; identical arrays share one range
            ranges = sorted({(r[8], r[9]) for r in records})
            jobs = {rng: [pool.submit(_sha256, view[at : min(at + wf.DIGEST_CHUNK,
                                                              rng[0] + rng[1])])
                          for at in range(rng[0], rng[0] + rng[1], wf.DIGEST_CHUNK)]
                    for rng in ranges}
            digests = {rng: hashlib.sha256(b"".join(j.result() for j in js)).digest()
                       for rng, js in jobs.items()}
            seconds = c.now() - t0
            ok = all(digests[(r[8], r[9])] == r[11] for r in records)
            hashed = sum(size for _, size in ranges)
        finally:
            view.release()
    return {"hash_s": seconds, "bytes": hashed, "arrays": len(records), "threads": threads,
            "digests_match_the_file": ok}


def _sha256(chunk: memoryview) -> bytes:
    return hashlib.sha256(chunk).digest()  # releases the GIL for the chunk


if __name__ == "__main__":
    args = c.args()
    c.emit({"sha256": sha256, "chunked": chunked}[args["mode"]](args))
