"""``with_pad_seq_unpad_matrix`` under spaCy-experimental's module name, with
its public type aliases (``biaffine_parser/with_pad_seq_unpad_matrix.py``).
The layer is ``biaffine.thinc.with_pad_seq_unpad_matrix``."""
from typing import List, Tuple

from thinc.types import Floats2d, Floats3d, Ints1d

from .thinc import with_pad_seq_unpad_matrix  # noqa: F401

InT = List[Floats2d]
OutT = List[Floats2d]
InnerInT = Tuple[Floats3d, Ints1d]
InnerOutT = Floats3d

__all__ = ["with_pad_seq_unpad_matrix", "InT", "OutT", "InnerInT", "InnerOutT"]
