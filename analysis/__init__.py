"""Analysis of what the profilers recorded: pure functions of the capture files.

Readers (``nsys`` (the only code that reads an nsys export), ``ncu``) turn files into plain records; ``run_summary``
turns one run's captures into numbers; ``verdicts`` compares variants against
measured noise; ``figures`` and ``markdown`` present, and never parse.
"""
