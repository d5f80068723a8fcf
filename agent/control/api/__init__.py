"""The HTTP control API under ``/api/v1``."""

__all__: list[str] = []
