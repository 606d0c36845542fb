"""Past one machine: routing requests over engine replicas (pure Python; the Ray Serve glue
lives in ``inference.fleet.serve``, imported only where Ray is installed)."""
