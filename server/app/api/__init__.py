"""The REST API under ``/api/v1``."""

__all__: list[str] = []
