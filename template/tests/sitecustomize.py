"""A speed-up of the tests, not of the project: Python imports this module as it starts each
process whose path holds this folder, as the processes that the tests start do (and
conftest.py imports it into pytest's).

Each such process then exits without the interpreter's last garbage collection, which walks
every object torch made (half a second of each exit, measured on a CPU) only to free memory
the OS takes back at once. Exit handlers registered later (logging's, multiprocessing's)
still run, and files are still flushed; what is skipped are the finalizers of objects left
in reference cycles, which Python never promises to run at exit.
"""

import atexit
import gc

atexit.register(gc.freeze)
