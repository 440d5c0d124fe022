"""LLM access: provider settings (``settings``), calls with failover (``client``), cost (``cost``).

This package is the only importer of litellm, and only inside functions: importing
litellm takes seconds, and the daemon must start without it. ``trainee.llm.settings``
is stdlib + msgspec and safe to import anywhere.
"""
