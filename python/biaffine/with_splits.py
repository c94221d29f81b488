"""``with_splits`` under spaCy-experimental's module name, with its public
type aliases (``biaffine_parser/with_splits.py``), so code importing them
from there can import them from here. The layer is ``biaffine.thinc.with_splits``."""
from typing import List, Tuple

from thinc.types import Floats2d, Ints1d

from .thinc import with_splits  # noqa: F401

InT = Tuple[List[Floats2d], List[Ints1d]]
OutT = List[Floats2d]
InnerInT = List[Floats2d]
InnerOutT = List[Floats2d]

__all__ = ["with_splits", "InT", "OutT", "InnerInT", "InnerOutT"]
