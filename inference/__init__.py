"""Laser's inference engine: model, KV cache, tier scheduler, runner and async front.

Nothing in this package imports Django; the web side reaches it only through the engine client
(``generate(request) -> async stream of deltas``, ``abort(id)``, ``stats()``).
"""

import os

# The engine steps on few cores beside other threads (the event loop, a Celery worker) and
# often other processes. OpenMP threads that spin after each parallel region then stall every
# op whenever one of them is descheduled: measured on 2 shared cores, a single stream's decode
# step took 885 ms spinning against 90 ms sleeping, and 16 streams through the HTTP server gave
# 16 against 110 tok/s. libgomp reads this when torch is imported, so it is set before that;
# an explicit OMP_WAIT_POLICY in the environment still wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
