"""User-facing errors: one line each, shown by the CLI without a traceback (exit code 2).

``LcragError`` is the one root: the CLI, the Python API and (later) the service catch it and show its message.
"""


class LcragError(Exception):
    """An error caused by input or configuration the user can fix."""


class InputError(LcragError):
    """A document, file or argument that cannot be used."""


class OptionError(InputError):
    """An option or setting value outside its valid range (raised by the settings objects, before any model call)."""


class DatasetError(InputError):
    """A dataset file or record that cannot be used; the message names ``file:line``."""


class RunDirectoryError(LcragError):
    """A run directory (user data) that is damaged, from other settings, or in use by another process.

    Never repaired silently: the message says what is wrong (``file:line``) and what the user can do.
    """


class NoAnswer(InputError):
    """The reader holds no answer for this question (a replayed recording without it): an evaluation skips the
    question and counts it, as no model can be asked instead."""


class ModelNotFoundError(LcragError):
    """A bundled or named model is not installed or not reachable."""


class ReaderError(LcragError):
    """A reader (LLM backend) failed after its retries."""


class Cancelled(Exception):
    """A question its caller cancelled (the client left): the generation was stopped, or never started. Not an
    LcragError: nothing is wrong with the input."""
