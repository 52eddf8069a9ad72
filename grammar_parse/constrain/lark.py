"""An xgrammar structural-tag format in llguidance's Lark dialect. (Being written.)"""

from __future__ import annotations
