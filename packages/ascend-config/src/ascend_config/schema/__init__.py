"""The pydantic schema of ``additional_config`` and everything that reads it back.

``base`` holds the strict, frozen section model and field helpers, ``sections`` the nested
sections, ``top`` the top level and its JSON Schema, ``introspect`` per-key documentation and
did-you-mean, ``validation`` best-effort validation that reports every problem.
"""
