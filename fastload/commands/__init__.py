"""The ``fastload`` commands, one module each: its one-line ``HELP``, ``add(sub)`` (its
arguments, imported only when that command runs) and ``run(args)`` (with its output).

A new command is one module here and one line in ``fastload.cli.COMMANDS``.
"""
