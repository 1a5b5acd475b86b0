"""The command line: ``kernelwright COMMAND`` (main.py) and the options its commands share
(options.py)."""
