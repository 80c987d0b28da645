"""Static files compressed the way whitenoise serves them, at levels that take seconds:
whitenoise's defaults (Brotli quality 11, gzip 9) took 128 s of `make run`'s start on two
busy cores for 13 MB of vendored JavaScript (the API docs, the admin, Chart.js), for files
about 10 % smaller than Brotli 5 makes in 2.5 s. Served the same (.br and .gz beside each)."""

from __future__ import annotations

import gzip

try:
    import brotli
except ImportError:  # whitenoise then writes .gz files only (Compressor.use_brotli is off)
    brotli = None

from whitenoise.compress import Compressor
from whitenoise.storage import CompressedStaticFilesStorage

BROTLI_QUALITY = 5
GZIP_LEVEL = 6


class FastCompressor(Compressor):
    @staticmethod
    def compress_brotli(data: bytes) -> bytes:
        return brotli.compress(data, quality=BROTLI_QUALITY)

    @staticmethod
    def compress_gzip(data: bytes) -> bytes:
        return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)  # mtime 0: the bytes depend on the content only


class FastCompressedStaticFilesStorage(CompressedStaticFilesStorage):
    def create_compressor(self, **kwargs) -> Compressor:
        return FastCompressor(**kwargs)
