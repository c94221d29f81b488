"""``python -m biaffine``: prints biaffine.info() (``--json``: as JSON)."""
import json
import sys

from . import info
from ._loader import format_info

if "--json" in sys.argv[1:]:
    print(json.dumps(info(), indent=2))
else:
    print(format_info(info()))
