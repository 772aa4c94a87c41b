"""Weight files: named arrays in a file of their own, outside the code (format v1,
``csrc/include/modpack/weights.h``; docs/format.md, "Weight files"). This package is the writer;
the C runtime is the reader."""

from .format import chunked_sha256, content_digest
from .writer import WrittenWeights, save_weights, write_weight_file

__all__ = ["WrittenWeights", "chunked_sha256", "content_digest", "save_weights",
           "write_weight_file"]
