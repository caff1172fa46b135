"""OpenTelemetry export of operations, live and after the fact (docs/telemetry.md).

``history`` reads an operation's records from the store; ``model``, ``segments``, ``content``
and ``spans`` turn them into span values and import neither OpenTelemetry nor the store;
``export`` alone imports the SDK, lazily; ``tracing`` is the API the commands call. The engine
never imports this package.
"""
