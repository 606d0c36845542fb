"""Laser's inference engine: model, KV cache, tier scheduler, runner and async front.

Nothing in this package imports Django; the web side reaches it only through the engine client
(``generate(request) -> async stream of deltas``, ``abort(id)``, ``stats()``).
"""
