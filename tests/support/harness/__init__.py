"""The crash and fault harness: scenarios, forked children, oracles and store signatures.

``scenario`` builds the refund scenarios and drives one to a terminal state the way an
operator would (approve what waits, resume, force-continue an escalation); ``children``
runs a drive in a forked child that a failpoint or a timer kills with SIGKILL;
``oracles`` says what must hold after any crash; ``signature`` fingerprints a store so a
crashed one can be compared with the states an uninterrupted run commits.
"""
