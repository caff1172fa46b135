"""The replay feature: drive an operation from a recording and report where it diverges.

``run`` replays a cassette as operations; ``deps`` builds what a replay operation runs with
(also when ``step``/``resume`` continue one); ``decisions`` stands in for the human and the
clock; ``divergence``, ``recorded_tools``, ``shapes`` and ``split`` read recorded requests.
It sits under the library API (``service``) and over the composition root (``wiring``);
cassette I/O itself is ``transcripts``.
"""
