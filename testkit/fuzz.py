"""Hypothesis strategies for remoting frames a fuzz test throws at an endpoint: whole frames of the codes
it serves with random header fields and bodies, the same cut short, with one byte changed, and bytes
that are no frame at all (the nameserver's and the brokers' endpoints are fuzzed with them)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st

from mqrules.remoting.frame import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand, SerializeType, encode_frame


def remoting_frames(
    codes: Sequence[int],
    field_names: Sequence[str],
    values: st.SearchStrategy[str],
    bodies: st.SearchStrategy[bytes],
    max_fields: int,
) -> st.SearchStrategy[bytes]:
    valid = st.builds(
        lambda code, opaque, flag, fields, body, kind: encode_frame(
            RemotingCommand(code, opaque=opaque, flag=flag, ext_fields=fields, body=body, serialize_type=kind)
        ),
        st.sampled_from(list(codes)),
        st.integers(-(2**31), 2**31 - 1),
        st.sampled_from([0, ONEWAY_FLAG, RESPONSE_FLAG]),
        st.dictionaries(st.sampled_from(list(field_names)), values, max_size=max_fields),
        bodies,
        st.sampled_from(list(SerializeType)),
    )
    truncated = valid.flatmap(lambda f: st.integers(0, len(f) - 1).map(lambda n: f[:n]))
    flipped = valid.flatmap(
        lambda f: st.integers(0, len(f) - 1).flatmap(lambda i: st.integers(0, 255).map(lambda b: f[:i] + bytes([b]) + f[i + 1 :]))
    )
    return st.one_of(valid, truncated, flipped, st.binary(max_size=64))
