"""``with_minibatch_by_padded_size`` under spaCy-experimental's module name,
with its public type variables (``biaffine_parser/with_minibatch_by_padded_size.py``).
The layer is ``biaffine.thinc.with_minibatch_by_padded_size``; its ``size``
is a ``biaffine.budget`` or, as spaCy's, an int counting padded items."""
from typing import Sized, TypeVar

from .thinc import with_minibatch_by_padded_size  # noqa: F401

OutT = TypeVar("OutT")
SizedInT = TypeVar("SizedInT", bound=Sized)

__all__ = ["with_minibatch_by_padded_size", "OutT", "SizedInT"]
