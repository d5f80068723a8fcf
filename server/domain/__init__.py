"""The coordinator's domain logic: scheduling transfers' legs onto agents (``scheduler``,
``legs``, ``leg_copies``), the states of a transfer (``states``), the stream equalizer
and its loop (``equalizer``, ``equalizer_loop``), pacing plans (``pacing``), link
probes (``probe``) and the telemetry collected from agents (``telemetry``).

It uses the app's records (tables, models, errors, the agents' HTTP client) and never
the API, the services or any client.
"""
