"""The coordinator: REST API, scheduler, equalizer, telemetry hub (design section 2)."""
