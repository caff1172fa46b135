"""OpenTelemetry export of operations, live and after the fact (docs/telemetry.md).

``spans``, ``segments`` and ``content`` build span data from store records and import no
OpenTelemetry; ``export`` alone imports the SDK, lazily; ``tracing`` is the API the commands
call. The engine never imports this package.
"""
