"""What the tests share besides fixtures (those are in ``tests/conftest.py``).

- ``paths``: the repository's folders and the shipped registry, recordings and task;
- ``cli``: the type of the in-process CLI runner fixture and ``json_out`` for ``--json``;
- ``clock``: ``FakeClock``, a clock tests move by hand;
- ``scripted``: scripted model turns for the refund registry, run through the library;
- ``providers``: provider fixtures (answers and requests in each API's shape);
- ``harness``: the crash, contention and fault harness of the reliability tests.
"""
