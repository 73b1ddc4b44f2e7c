"""Values as the text Spark's writers give them, built in Arrow: csv and JSON lines, JSON values."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

TEXT = pa.large_string()
_SPARK_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}  # Java's Double.toString


def concat(*parts: pa.Array | str) -> pa.Array:
    """The parts joined value by value (a str is the same in every row); null where any part is."""
    texts = [pa.scalar(p, TEXT) if isinstance(p, str) else p.cast(TEXT) for p in parts]
    return pc.binary_join_element_wise(*texts, pa.scalar("", TEXT))


def lines(texts: pa.Array) -> bytes:
    """Each value of a string or binary array without nulls, then a newline, as one bytes object."""
    joined = pc.binary_join_element_wise(texts.cast(pa.large_binary()), pa.scalar(b"", pa.large_binary()),
                                         pa.scalar(b"\n", pa.large_binary()))
    offsets = np.frombuffer(joined.buffers()[1], np.int64)[joined.offset:joined.offset + len(joined) + 1]
    return joined.buffers()[2][offsets[0]:offsets[-1]].to_pybytes()


def float_texts(array: pa.Array) -> pa.Array:
    """Doubles and floats in their shortest exact form, as Spark writes them: ``5.0`` rather than
    Arrow's ``5`` (Spark's readers infer a whole number as a long), ``NaN``, ``Infinity`` and
    ``-Infinity`` rather than ``nan`` and ``inf`` (which Spark's csv reader refuses)."""
    texts = pc.cast(array, TEXT)
    whole = pc.and_(pc.is_finite(array), pc.equal(array, pc.floor(array)))
    if pc.any(whole).as_py():
        whole = pc.and_(whole, pc.invert(pc.match_substring(texts, "e")))  # 1e+16 stays as it is
        texts = pc.if_else(whole, concat(texts, ".0"), texts)
    if not pc.all(pc.is_finite(array)).as_py():
        texts = pa.array([_SPARK_NON_FINITE.get(t, t) for t in texts.to_pylist()], TEXT)
    return texts
