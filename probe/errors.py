"""One error type for the CLI: its message is printed as a single line, without a traceback; and any error's first
line, for the messages that quote one."""


class ProbeError(Exception):
    """Bad input or an unusable environment. `exit_code` is what the CLI returns."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def first_line(e: BaseException, with_type: bool = False) -> str:
    """An error in one line: the first non-empty line of its message, else its type's name; `with_type` puts the
    type's name in front ("OSError: ...") where the message alone would not say what failed."""
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    name = type(e).__name__
    if not lines:
        return name
    return f"{name}: {lines[0]}" if with_type else lines[0]
