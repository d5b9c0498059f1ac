"""The ``slotune`` command line: one module per command group (``main`` parses and
dispatches; ``output`` is how every command writes for people)."""
