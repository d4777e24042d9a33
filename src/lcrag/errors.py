"""User-facing errors: one line each, shown by the CLI without a traceback (exit code 2)."""


class LcragError(Exception):
    """An error caused by input or configuration the user can fix."""


class InputError(LcragError):
    """A document, file or argument that cannot be used."""


class ModelNotFoundError(LcragError):
    """A bundled or named model is not installed or not reachable."""


class ReaderError(LcragError):
    """A reader (LLM backend) failed after its retries."""
