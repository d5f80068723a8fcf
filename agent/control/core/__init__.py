"""Settings of the agent."""

__all__: list[str] = []
