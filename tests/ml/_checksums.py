"""The chunked XXH3 checksum written out plainly, to check opentinker_runtime.ml.weights against."""

from __future__ import annotations

import xxhash

MIB = 1 << 20


def reference_chunked_xxh3(data: bytes) -> str:
    """CHECKSUM_ALGORITHM_XXH3_64_CHUNKED as weights.proto defines it, written out plainly."""
    digests = b"".join(xxhash.xxh3_64(data[start:start + 8 * MIB]).digest()
                       for start in range(0, len(data), 8 * MIB))
    return xxhash.xxh3_64(digests).hexdigest()
