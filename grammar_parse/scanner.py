"""The streaming scanner: among the delimiters live in a parser state, which one fires next.

One Scanner exists per distinct watch-list (cached on the grammar). ``scan`` returns the delimiter to
commit now, if any, and ``hold``: the first buffer position that might still belong to a delimiter.
Everything before ``hold`` can be emitted as text at once; everything from it waits for more input.

The choice among complete matches is transformers': earliest start, then longest, then opens before
closes (terminal priority), then field name. A complete match is only committed if it starts before
every pending one, because a pending delimiter that starts no later might be the one that fires.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .delimiters import Hit, LiteralMatcher

if TYPE_CHECKING:
    from .grammar import Terminal

#: Per-session memo of complete-match searches: terminal name -> (buffer, searched-from, hit).
SearchCache = dict[str, tuple[str, int, Hit | None]]


class Scanner:
    """Commit/hold decisions for one set of live delimiters."""

    def __init__(self, watch: tuple[Terminal, ...]) -> None:
        self.watch = watch
        self.entries = [(t, t.matcher) for t in watch]
        # The common case inside a region: one literal close delimiter.
        self.single_literal = (
            watch[0].matcher if len(watch) == 1 and isinstance(watch[0].matcher, LiteralMatcher)
            and len(watch[0].matcher.literals) == 1 else None
        )

    def scan(self, buf: str, pos: int, eos: bool, cache: SearchCache) -> tuple[Terminal | None, Hit | None, int]:
        """(terminal to commit or None, its hit, hold position) for ``buf`` from ``pos``."""
        hold = len(buf)
        best: Terminal | None = None
        best_hit: Hit | None = None
        best_key: Any = None
        for term, matcher in self.entries:
            cached = cache.get(term.name)
            if cached is not None and cached[0] is buf and cached[1] <= pos and (cached[2] is None or cached[2][0] >= pos):
                hit = cached[2]
            else:
                hit = matcher.search(buf, pos)  # type: ignore[union-attr]
                cache[term.name] = (buf, pos, hit)
            if not eos:
                hit, pending = matcher.probe(buf, pos, hit)  # type: ignore[union-attr]
                if pending != -1 and pending < hold:
                    hold = pending
            if hit is not None:
                key = (hit[0], hit[0] - hit[1], term.sort_key)
                if best_key is None or key < best_key:
                    best, best_hit, best_key = term, hit, key
        if best_hit is not None and best_hit[0] >= hold:
            return None, None, hold
        return best, best_hit, hold


__all__ = ["Scanner", "SearchCache"]
