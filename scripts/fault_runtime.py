"""stub"""


def cleanup() -> None:
    pass
