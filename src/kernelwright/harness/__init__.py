"""The benchmark and verification harness: `kernelwright bench`.

problems.py loads KernelBench-format files; verify.py judges any candidate
against the PyTorch reference (the same checks for the compiler, the autotuner
and the search agent); timing.py times candidate and reference; worker.py runs
one problem in its own process; runner.py runs a suite of workers under time
and memory limits and stores results in SQLite; metrics.py makes the table;
report.py the HTML page; command.py is the ``bench`` subcommand.
"""
