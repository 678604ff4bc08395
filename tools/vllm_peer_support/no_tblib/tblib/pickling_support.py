"""``install()`` of the stand-in: tracebacks stay unpicklable, as without tblib."""


def install(*_args: object, **_kwargs: object) -> None:
    """Do nothing (the real one registers picklers for traceback objects)."""
