"""The native codec's own tests exist only where it is built: on a machine without a C compiler the
store runs on the Python codec, which tests/brokers/test_codec.py checks (and it fails if a C compiler
is there but the module is not built)."""

from brokers.store import codec

collect_ignore = [] if codec.IMPLEMENTATION == "native" else ["test_codec_native.py"]
