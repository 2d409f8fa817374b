"""One error type for the CLI: its message is printed as a single line, without a traceback."""


class ProbeError(Exception):
    """Bad input or an unusable environment. `exit_code` is what the CLI returns."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code
