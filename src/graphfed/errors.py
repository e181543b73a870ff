"""The one exception type the CLI turns into a readable message and exit code 2."""


class GraphfedError(ValueError):
    """Bad input: the message names the problem and, where it helps, the valid choices.

    A ValueError, so that pydantic validators raising it report the offending key.
    """
