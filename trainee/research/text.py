"""Bounded text: the one truncation (and its marker) for what people and models read."""

from __future__ import annotations

__all__ = ["truncate"]


def truncate(text: str, limit: int, *, keep: str = "head") -> str:
    """``text`` cut to at most ``limit`` chars plus a ``[... truncated N chars]`` marker.

    The cut falls on a line break when one is near. ``keep="tail"`` keeps the end
    (for logs and histories) and puts the marker first.
    """
    limit = max(0, limit)
    if len(text) <= limit:
        return text
    if keep == "tail":
        kept = text[len(text) - limit :]
        nl = kept.find("\n")
        if 0 <= nl <= len(kept) // 2:
            kept = kept[nl + 1 :]  # start at a whole line
        return f"[... truncated {len(text) - len(kept)} chars]\n" + kept
    kept = text[:limit]
    nl = kept.rfind("\n")
    if nl >= len(kept) // 2:
        kept = kept[:nl]  # end at a whole line
    return kept + f"\n[... truncated {len(text) - len(kept)} chars]"
