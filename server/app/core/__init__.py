"""Settings and token handling of the coordinator."""

__all__: list[str] = []
