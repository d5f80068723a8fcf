"""One module per resource."""

__all__: list[str] = []
